"""Issue 45, defect 4: the page's embedded data carries no raw <, > or &: a config path holding "<!--<script>" used
to reach the HTML parser inside the data's <script> element and blank the page."""

from __future__ import annotations

import json
import re
import shutil
from importlib import resources

from symmem.cli.main import main


def test_embedded_data_has_no_raw_markup(capsys, tmp_path):
    folder = tmp_path / "<!--<script>&x"
    folder.mkdir()
    cfg = folder / "c&<b>.json"
    shutil.copy(resources.files("symmem.presets").joinpath("llama-3-8b.json"), cfg)
    out = tmp_path / "page.html"
    assert main(["html", "--model", str(cfg), "-o", str(out)]) == 0, capsys.readouterr().err
    page = out.read_text()
    scripts = re.findall(r'<script id="data" type="application/json">(.*?)</script>', page, re.S)
    assert len(scripts) == 1
    body = scripts[0]
    assert not set("<>&") & set(body)
    assert json.loads(body)["model"] == str(cfg)  # the same string, through JSON's \\u escapes
    assert page.count("<script") == page.count("</script>")  # nothing the path holds opened or closed an element
