"""Moved modules stay importable under their old names (searchenv.utils.moved)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from searchenv.utils.moved import register_moves


def test_the_old_name_imports_the_new_module_with_a_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "toypkg"
    (pkg / "new").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "new" / "__init__.py").write_text("")
    (pkg / "new" / "home.py").write_text("VALUE = 42\nclass Thing:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m.startswith("toypkg")]:
        monkeypatch.delitem(sys.modules, name)
    register_moves({"toypkg.old": "toypkg.new.home"})
    with pytest.warns(DeprecationWarning, match=r"toypkg\.old moved to toypkg\.new\.home"):
        from toypkg.old import VALUE, Thing  # type: ignore[import-not-found]
    import toypkg.new.home as home  # type: ignore[import-not-found]
    import toypkg.old as old  # type: ignore[import-not-found]

    assert old is home and Thing is home.Thing and VALUE == 42
    assert home.__name__ == "toypkg.new.home" and home.__spec__.name == "toypkg.new.home"
    with pytest.raises(ModuleNotFoundError):
        __import__("toypkg.unknown")
    with pytest.raises(ValueError, match="also targets"):
        register_moves({"toypkg.a": "toypkg.b", "toypkg.b": "toypkg.c"})
