"""gdsbench: storage and checkpoint benchmarks (fio, gdsio, checkpoint engines)."""

__version__ = "0.1.0"
