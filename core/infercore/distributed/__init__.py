"""Machinery for running one engine over several devices and processes: the shared-memory message
queue of the control path, process-group set-up and the worker RPC codec."""
