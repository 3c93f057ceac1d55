"""The API reference (docs/api.md, rendered by mkdocstrings from the docstrings) renders: no
Sphinx role (``:func:`x```) left in a docstring, where mkdocstrings would show it as literal text,
and the page holds a heading for each public object it documents."""

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "sweeps"
ROLE = re.compile(r":(?:py:)?(?:func|class|mod|data|meth|attr|exc|obj|const):`")
LITERAL_ROLES = (":func:", ":class:", ":mod:", ":data:", ":meth:", ":attr:", ":exc:")
RENDERED = ("sweeps", "sweeps.api.run", "sweeps.report.results.results", "sweeps.report.results.verdict",
            "sweeps.report.results.job_record", "sweeps.report.verdict.Finding", "sweeps.data.spec.DataSpec")


def _docstrings(tree: ast.Module):
    """(line, text) of every docstring: module, class and function ones, and the bare string after
    an assignment that griffe renders as the attribute's docstring."""
    for node in ast.walk(tree):
        if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)):
            yield node.lineno, node.value.value


def test_no_sphinx_role_in_a_docstring():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, text in _docstrings(tree):
            for m in ROLE.finditer(text):
                at = line + text.count("\n", 0, m.start())
                found.append(f"{path.relative_to(ROOT)}:{at}: {text[m.start():m.start() + 60].splitlines()[0]}")
    assert not found, ("Sphinx roles in docstrings (mkdocstrings shows them as literal text; write "
                       "[`name`][full.dotted.path] for an object on docs/api.md, else `name`):\n"
                       + "\n".join(found))


@pytest.mark.slow
def test_api_reference_renders(tmp_path):
    pytest.importorskip("mkdocstrings_handlers.python", reason="the docs extra: pip install -e '.[docs]'")
    pytest.importorskip("material", reason="the docs extra: pip install -e '.[docs]'")
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    page = (site / "api" / "index.html").read_text(encoding="utf-8")
    left = [role for role in LITERAL_ROLES if role in page]
    assert not left, f"literal Sphinx roles on the API page: {left}"
    assert "][sweeps." not in page, "an unresolved cross-reference on the API page"
    for path in RENDERED:
        assert re.search(rf'<h\d[^>]*\bid="{re.escape(path)}"', page), f"no heading for {path} on the API page"
