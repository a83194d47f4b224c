"""A streaming copy query run in its own process by ``test_exactly_once``, so that the test
can SIGKILL the driver mid-batch and start the query again from its checkpoint.

    python eos_query.py BOOTSTRAP CHECKPOINT GUARANTEE QUERY_ID_FILE [STALL_FLAG]

Copies topic ``in`` to ``out`` with ``trigger(availableNow=True)`` and ``maxOffsetsPerTrigger``
600.  With ``STALL_FLAG``, the task reading partition 0 stalls (in a UDF, after handing some
rows to the sink) at offset ``STALL_AT`` of its batch, creates the flag file, and sleeps
until it is killed.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

STALL_AT = 260


def main(bootstrap: str, checkpoint: str, guarantee: str, query_id_file: str,
         stall_flag: str | None = None) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    from pyspark.sql.functions import udf

    import trilog.spark

    spark = (SparkSession.builder.master("local[2]").appName("trilog-eos-query")
             .config("spark.ui.enabled", "false")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             # Small batches into the UDF and the sink: the sink has rows of the batch in
             # flight before the UDF stalls.
             .config("spark.sql.execution.arrow.maxRecordsPerBatch", "20")
             .config("spark.sql.execution.python.udf.maxRecordsPerBatch", "20")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    trilog.spark.register(spark)

    def stall(value, partition, offset):
        if stall_flag is not None and partition == 0 and offset >= STALL_AT:
            Path(stall_flag).touch()
            time.sleep(3600)
        return value

    copy = udf(stall, "binary", useArrow=False)
    query = (spark.readStream.format("trilog").option("bootstrap.servers", bootstrap)
             .option("subscribe", "in").option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "600").load()
             .select(copy("value", "partition", "offset").alias("value"))
             .writeStream.format("trilog").option("bootstrap.servers", bootstrap)
             .option("topic", "out").option("deliveryGuarantee", guarantee)
             .option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    Path(query_id_file).write_text(str(query.id))
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])
