"""An attention backend that delegates to core's reference backend and counts its calls."""

from infercore.plugin_api import ReferenceAttentionBackend

CALLS = {"forward": 0}


class CountingAttentionBackend(ReferenceAttentionBackend):
    name = "counting"

    @staticmethod
    def get_impl_cls():
        base = ReferenceAttentionBackend.get_impl_cls()

        class CountingImpl(base):
            def forward(self, q, k, v, kv_cache, metadata, out):
                CALLS["forward"] += 1
                return super().forward(q, k, v, kv_cache, metadata, out)

        return CountingImpl
