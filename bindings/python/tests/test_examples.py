import pathlib
import runpy


def test_the_readme_quickstart_runs(capsys):
    example = pathlib.Path(__file__).resolve().parents[1] / "examples" / "quickstart.py"
    runpy.run_path(str(example), run_name="__main__")
    # 8 blocks. Worker 1 caches 6: 2 new + 2 queued prefill blocks, 10 decode blocks = 14.
    # Worker 2 caches none: 8 prefill blocks + 2 decode blocks = 10, the minimum.
    assert capsys.readouterr().out == "worker 2, cost 10.0, breakdown [10.0]\n"


def test_the_numpy_example_runs(capsys):
    example = pathlib.Path(__file__).resolve().parents[1] / "examples" / "numpy_rows.py"
    runpy.run_path(str(example), run_name="__main__")
    # Worker 11 carries the least load; the router then finds worker 13's four cached blocks
    # (and, with an empty ledger, no load anywhere).
    assert capsys.readouterr().out == "select: 11\nroute: 13 cached blocks: [0, 0, 0, 4]\n"
