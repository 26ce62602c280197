from sink_run import SUMMARY
from tuitrain.sinks.summary import format_duration, format_summary_table, format_value


def test_table_matches_burn_layout_with_train_rows_first():
    summary = {"valid/loss": SUMMARY["valid/loss"], **SUMMARY}
    assert format_summary_table(summary) == "\n".join(
        [
            "| Split | Metric   | Min.      | Epoch | Max.   | Epoch |",
            "|-------|----------|-----------|-------|--------|-------|",
            "| train | loss     | 1.000e-07 |     1 | 2.5000 |     1 |",
            "| train | accuracy |    0.2500 |     1 | 1.0000 |     2 |",
            "| valid | loss     |    0.3000 |     2 | 0.7000 |     1 |",
            "| valid | accuracy |    0.6000 |     1 | 0.8000 |     2 |",
        ]
    )


def test_table_edge_cases():
    assert format_summary_table({}) == ""
    table = format_summary_table({"lr": {"min": None, "max": 0.1}, "test/f1": {"min": 1, "min_epoch": 3}})
    rows = table.splitlines()[2:]
    assert rows[0].split("|")[1:3] == [" -     ", " lr     "]  # a key without a split
    assert rows[1] == "| test  | f1     |    1 |     3 |      - |     - |"  # other splits after train and valid


def test_value_and_duration_formats():
    assert format_value(0.41234) == "0.4123"
    assert format_value(3e-4) == "3.000e-04"
    assert format_value(123456.0) == "1.235e+05"
    assert format_value(27996.73591) == "27996.7" and format_value(999.12345) == "999.1235"
    assert format_value(0.0) == "0.0000"
    assert format_value(float("nan")) == "nan"
    assert format_value(7) == "7"
    assert format_duration(62.4) == "0:01:02"
    assert format_duration(90061) == "25:01:01"
    assert format_duration(None) == "-"


def test_a_summary_without_epochs_has_no_epoch_columns():
    """Monitor's loop has no epochs: its table is split, metric, min and max."""
    table = format_summary_table(
        {"train/loss": {"min": 0.5, "max": 2.0, "last": 0.5}, "valid/loss": {"min": 0.7, "max": 1.9, "last": 0.7}}
    ).splitlines()
    assert table[0] == "| Split | Metric | Min.   | Max.   |"
    assert table[2:] == ["| train | loss   | 0.5000 | 2.0000 |", "| valid | loss   | 0.7000 | 1.9000 |"]


def test_throughput_reads_with_one_decimal_in_the_table_and_the_log():
    """`throughput 289.8052` in the end's table and experiment.log read as the console's lines do (issue 51)."""
    from tuitrain.sinks.summary import format_metric

    assert format_metric("train/throughput", 289.80524) == "289.8"
    assert format_metric("throughput", 27996.7359) == "27996.7"
    assert format_metric("train/loss", 0.289805) == "0.2898"  # the rest as before
    assert format_metric("train/throughput", float("nan")) == "nan"
    table = format_summary_table({"train/throughput": {"min": 289.80524, "min_epoch": 1, "max": 512.0, "max_epoch": 2}})
    assert table.splitlines()[2] == "| train | throughput | 289.8 |     1 | 512.0 |     2 |"
