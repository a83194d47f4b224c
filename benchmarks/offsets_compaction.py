"""``__consumer_offsets`` under a million offset commits: does the log cleaner keep it small?

A broker process (``trilog broker``, a 1 MiB offsets segment so the cleaner has segments to
clean) takes ``--commits`` OffsetCommit entries for ``--groups`` groups, each request
committing ``--partitions`` partitions of one group (the way a consumer commits).  Printed:
the commit rate, the bytes the commits wrote (as if nothing were cleaned: the sum of the
offsets topic's growth), and the offsets topic's size on disk at the end against the latest
offsets it must keep (groups x partitions records).

    python benchmarks/offsets_compaction.py                    # 1,000,000 offset commits
    python benchmarks/offsets_compaction.py --commits 200000

Measured on 2026-11-23 (2 cores): 1,000,000 offsets in 100,000 requests at 9,700 offsets/s;
the offsets topic peaked at 3.8 MiB and ended at 2.1 MiB; uncleaned it would hold
100,000 batches of 551 bytes, 55 MB.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import BrokerProcess, FrameReader, call, connect, human_bytes  # noqa: E402

from trilog import protocol as p  # noqa: E402
from trilog.protocol import decode_response, encode_request  # noqa: E402

SEGMENT_BYTES = 1 << 20


def request(version: int, message, correlation: int) -> bytes:
    return encode_request(message, version, correlation, "offsets-bench")


def roundtrip(sock, reader, message, version: int, correlation: int):
    payload = call(sock, request(version, message, correlation), reader)
    return decode_response(bytes(payload), message.API_KEY, version)[1]


def commit_request(group: str, topic: str, partitions: int, offset: int):
    R = p.OffsetCommitRequest
    T = R.OffsetCommitRequestTopic
    return R(group_id=group, generation_id_or_member_epoch=-1, member_id="",
             retention_time_ms=-1, topics=[T(name=topic, partitions=[
                 T.OffsetCommitRequestPartition(partition_index=i, committed_offset=offset,
                                                committed_leader_epoch=-1,
                                                commit_timestamp=-1, committed_metadata="")
                 for i in range(partitions)])])


def offsets_topic_bytes(log_dir: str) -> int:
    total = 0
    for name in os.listdir(log_dir):
        if name.startswith("__consumer_offsets-"):
            d = os.path.join(log_dir, name)
            total += sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)
                         if f.endswith(".log"))
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=1_000_000,
                        help="offset entries committed in all (default 1,000,000)")
    parser.add_argument("--groups", type=int, default=20, help="groups (default 20)")
    parser.add_argument("--partitions", type=int, default=10,
                        help="partitions each commit request carries (default 10)")
    args = parser.parse_args(argv)
    log_dir = tempfile.mkdtemp(prefix="trilog-offsets-bench-")
    overrides = {"offsets.topic.segment.bytes": SEGMENT_BYTES,
                 "offsets.topic.num.partitions": 4, "log.cleaner.backoff.ms": 200,
                 "group.initial.rebalance.delay.ms": 0}
    try:
        with BrokerProcess(log_dir, overrides) as broker:
            sock = connect(broker.address)
            reader = FrameReader(sock)
            correlation = 0
            R = p.CreateTopicsRequest
            roundtrip(sock, reader, R(topics=[R.CreatableTopic(
                name="t", num_partitions=args.partitions, replication_factor=1,
                assignments=[], configs=[])], timeout_ms=10_000), 2, correlation)
            for g in range(args.groups):  # the offsets topic exists and every group loads
                while True:
                    correlation += 1
                    response = roundtrip(sock, reader, p.FindCoordinatorRequest(
                        key=f"group-{g}", key_type=0), 1, correlation)
                    if response.error_code == 0:
                        break
                    time.sleep(0.05)
            requests = args.commits // args.partitions
            frames = [request(2, commit_request(f"group-{g}", "t", args.partitions, 0), 0)
                      for g in range(args.groups)]
            peak = 0
            started = time.perf_counter()
            for i in range(requests):
                # The committed offsets change with every request; the frames are re-encoded
                # per group every 1,000 requests to keep the client's cost small.
                g = i % args.groups
                if i % 1000 < args.groups:
                    frames[g] = request(2, commit_request(
                        f"group-{g}", "t", args.partitions, i), i)
                payload = call(sock, frames[g], reader)
                if i % 5_000 == 0:
                    peak = max(peak, offsets_topic_bytes(log_dir))
                    _header, response = decode_response(bytes(payload), p.ApiKey.OFFSET_COMMIT, 2)
                    errors = {x.error_code for t in response.topics for x in t.partitions}
                    if errors != {0}:
                        print(f"commit errors: {errors}", file=sys.stderr)
                        return 1
            elapsed = time.perf_counter() - started
            deadline = time.monotonic() + 60
            size = offsets_topic_bytes(log_dir)
            while size > 4 * SEGMENT_BYTES and time.monotonic() < deadline:
                time.sleep(0.5)
                size = offsets_topic_bytes(log_dir)
            sock.close()
        keys = args.groups * args.partitions
        print(f"offset commits: {requests * args.partitions:,} in {requests:,} requests, "
              f"{elapsed:.1f} s ({requests * args.partitions / elapsed:,.0f} offsets/s)")
        print(f"latest offsets to keep: {keys:,} (groups x partitions)")
        print(f"__consumer_offsets on disk: {human_bytes(size)} at the end, "
              f"{human_bytes(peak)} at most while committing "
              f"(segments of {human_bytes(SEGMENT_BYTES)}, 4 partitions; the active segments "
              "are never cleaned)")
        print("target: stays within a few segments per partition, whatever the number of "
              "commits")
        return 0
    finally:
        shutil.rmtree(log_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
