"""infercore's XPU platform."""
