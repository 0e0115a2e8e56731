"""``geosteer decompose`` and one-line errors of the ``geosteer directional`` verbs."""

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner


def test_decompose_cli_json_and_csv(tmp_path):
    from geosteer.cli import app

    csv = tmp_path / "d.csv"
    r = CliRunner().invoke(app, ["decompose", "-m", "tiny-llama", "--text-file", __file__, "--tokens", "24",
                                 "--layers", "0-1", "--json", "--csv", str(csv)])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    sites = {(row["layer"], row["site"]) for row in data["rows"]}
    assert sites >= {(0, "attn"), (0, "mlp"), (0, "block"), (1, "value")}
    assert csv.read_text().splitlines()[0].startswith("layer,space,site")


@pytest.mark.parametrize("args,msg", [
    (["directional", "sweep", "--sites", "resid_foo"], "unknown site 'resid_foo'; valid: resid_attn"),
    (["directional", "ppl", "--site", "resid_attn", "--s-par", "nan"], "--s-par must be a finite number"),
    (["directional", "pretrain", "--variants", "baseline,foo"], "unknown variant 'foo'; valid: baseline, attn_par"),
])
def test_cli_bad_input_one_line_error(args, msg):
    p = subprocess.run([sys.executable, "-m", "geosteer.cli", *args], capture_output=True, text=True)
    assert p.returncode == 2 and msg in p.stderr and "Traceback" not in p.stderr
