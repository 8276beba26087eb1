"""squall's version, which the driver and Spark's executors compare before a run starts."""

__version__ = "0.1.0"
