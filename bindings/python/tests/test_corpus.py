import pathlib

import libroute

from corpus import check_float_parsing, run, scenarios


def test_the_installed_package_is_under_test():
    # Not the source tree: the installed wheel, with its native extension inside.
    package = pathlib.Path(libroute.__file__).resolve().parent
    assert any(package.glob("_native*.so")), f"no native extension in {package}"
    assert pathlib.Path(libroute._native.__file__).parent == package


def test_golden_corpus_bit_for_bit():
    check_float_parsing()
    problems, n = [], 0
    for s in scenarios():
        problems += run(s)
        n += 1
    assert n >= 60, f"only {n} scenarios"
    assert not problems, "\n".join(problems)
