"""The README and docs stand alone: every relative link points to a file inside the repo.

A user's clone has only the repository; links to the files of the workspace it was
developed in (`../shared/...`) were dead there. Reproduction pages are written as
methods get measured, so links into docs/reproductions/ may point to pages not yet
written (docs/methods.md says so).
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "third_party" / "README.md", *sorted(ROOT.glob("docs/*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_stay_inside_the_repo_and_exist(doc):
    text = doc.read_text()
    assert "../shared" not in text
    for target in LINK.findall(text):
        if re.match(r"[a-z]+://|mailto:|#", target):
            continue
        path = (doc.parent / target.split("#")[0]).resolve()
        assert path.is_relative_to(ROOT), f"{doc.name}: {target} leaves the repository"
        if path.parent != ROOT / "docs" / "reproductions":
            assert path.exists(), f"{doc.name}: {target} does not exist"


def test_every_seed_method_has_an_entry_in_methods_md():
    text = (ROOT / "docs" / "methods.md").read_text()
    slugs = re.findall(r"^\| \d+ \| `(\w+)` \|", text, flags=re.M)
    assert len(slugs) == 30 and len(set(slugs)) == 30
    for slug in slugs:
        assert re.search(rf"^## \d+\. `{slug}` — ", text, flags=re.M), slug
        assert f"(reproductions/{slug}.md)" in text, slug
