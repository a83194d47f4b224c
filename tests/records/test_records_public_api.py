import trilog.records


def test_all_names_exist_and_are_sorted_and_unique():
    names = trilog.records.__all__
    assert len(names) == len(set(names))
    for name in names:
        assert hasattr(trilog.records, name), name


def test_all_covers_every_public_name():
    public = {
        name
        for name, obj in vars(trilog.records).items()
        if not name.startswith("_") and getattr(obj, "__module__", "").startswith("trilog.records")
    }
    assert public <= set(trilog.records.__all__)


def test_names_storage_relies_on():
    for name in [
        "RecordBatch",
        "Record",
        "RecordBatchBuilder",
        "build_batch",
        "iter_batches",
        "patch_base_offset",
        "MemoryRecords",
        "LegacyRecordBatch",
        "legacy_to_v2",
        "v2_to_legacy",
    ]:
        assert name in trilog.records.__all__
