"""Every op the core issue names is checked against PyTorch somewhere in the suite."""

from tests.op_coverage import covered_ops, main, missing_ops


def test_every_required_op_is_checked_against_torch(capsys):
    main()  # the printed list (run `python -m tests.op_coverage` to see it)
    assert "op names checked against PyTorch" in capsys.readouterr().out
    assert missing_ops(covered_ops()) == []
