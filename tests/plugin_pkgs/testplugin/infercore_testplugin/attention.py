"""An attention backend that delegates to the CPU backend and counts its calls."""

from infercore_cpu.attention import TorchPagedAttentionBackend

CALLS = {"forward": 0}


class CountingAttentionBackend(TorchPagedAttentionBackend):
    name = "counting"

    @staticmethod
    def get_impl_cls():
        base = TorchPagedAttentionBackend.get_impl_cls()

        class CountingImpl(base):
            def forward(self, q, k, v, kv_cache, metadata, out):
                CALLS["forward"] += 1
                return super().forward(q, k, v, kv_cache, metadata, out)

        return CountingImpl
