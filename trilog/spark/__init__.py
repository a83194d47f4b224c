"""The PySpark data source ``trilog`` (Spark 4's Python Data Source API).

    import trilog.spark
    trilog.spark.register(spark)
    df = (spark.read.format("trilog")
          .option("bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "page_views")
          .load())

Options follow Spark's Kafka source; see ``docs/spark.md``.  This package is the only part of
trilog that imports pyspark; it reads and writes through the blocking ``trilog.sync`` facades.
"""

from trilog.spark._cluster import DataLossError
from trilog.spark._options import OptionError
from trilog.spark._read import row_schema
from trilog.spark._source import TrilogBatchReader, TrilogDataSource, TrilogStreamReader
from trilog.spark._workers import SparkSetupError, register
from trilog.spark._write import TrilogCommitMessage, TrilogStreamWriter, TrilogWriter

__all__ = [
    "DataLossError",
    "OptionError",
    "SparkSetupError",
    "TrilogBatchReader",
    "TrilogCommitMessage",
    "TrilogDataSource",
    "TrilogStreamReader",
    "TrilogStreamWriter",
    "TrilogWriter",
    "register",
    "row_schema",
]
