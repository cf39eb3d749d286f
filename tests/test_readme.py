"""The README's library quickstart runs as printed and gives estimates near the truth."""

import re
from pathlib import Path

import numpy as np


def test_readme_quickstart_runs(capsys):
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    code = re.search(r"## Library quickstart\n\n```python\n(.*?)```", readme, re.S).group(1)
    namespace: dict = {}
    exec(compile(code, "README quickstart", "exec"), namespace)
    out = capsys.readouterr().out
    assert "sqrt(CRLB)" in out and "nonlinear_oe" in out
    est = namespace["est"]  # the last estimator of the loop: nonlinear_oe
    assert int(est.status) == 0
    truth = np.array([5.0, 1.5, 5.0, 2.0])
    std = np.sqrt(np.diag(np.asarray(namespace["bound"])))
    # one noisy trial: within 5 sigma of the truth
    assert np.all(np.abs(np.asarray(est.value) - truth) < 5 * std)
