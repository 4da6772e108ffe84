"""Builds the native kernels (native/src/*.c) as episodic_cli.native._kernels; all metadata is in pyproject.toml."""
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "episodic_cli.native._kernels",
            sources=["native/src/kernels_module.c", "native/src/surprise.c", "native/src/quant.c", "native/src/scale.c",
                     "native/src/assemble.c", "native/src/rope_shift.c", "native/src/rows_f16.c", "native/src/simd.c",
                     "native/src/block_select.c", "native/src/eval_gate.c", "native/src/crc32.c"],
            extra_compile_args=["-O3", "-std=c99", "-fno-trapping-math", "-ffp-contract=off"],
        )
    ]
)
