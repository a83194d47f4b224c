"""The one thing pyproject.toml cannot say: trilog's optional C accelerator.

``trilog.records._speedups`` holds the per-record hot paths of RecordBatch v2 (encoding,
decoding, murmur2).  It is optional: when no C compiler is at hand the build goes on without
it and trilog runs its pure-Python code, which gives the same results.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "trilog.records._speedups",
            sources=["trilog/records/_speedups.c"],
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter",
                                "-Wno-missing-field-initializers"],
            optional=True,
        )
    ]
)
