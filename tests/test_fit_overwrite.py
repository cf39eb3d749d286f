"""``jaxid fit --overwrite`` clears what the earlier fit wrote (``jaxid.fit.export.clear_previous_fit``):
its tables and the parameter files and figures its manifest lists; any other file stays, and a listed
path outside the folder is never touched."""

import json

from jaxid.fit.export import FIT_TABLES, clear_previous_fit


def test_an_overwrite_clears_the_previous_fits_files_only(tmp_path):
    out = tmp_path / "fit"
    (out / "identified").mkdir(parents=True)
    (out / "figures").mkdir()
    outside = tmp_path / "outside.toml"
    owned = ["identified/idim_ls.toml", "identified/idim_ls.urdf", "figures/residual_spectra.png"]
    for name in [*FIT_TABLES, *owned, "notes.txt", "identified/mine.toml"]:
        (out / name).write_text("x")
    outside.write_text("x")
    manifest = {"exported": owned[:2] + ["../outside.toml"], "figures": owned[2:]}
    (out / "manifest.json").write_text(json.dumps(manifest))
    removed = clear_previous_fit(out)
    assert sorted(removed) == sorted([*FIT_TABLES, *owned])
    assert sorted(p.name for p in out.rglob("*") if p.is_file()) == ["manifest.json", "mine.toml", "notes.txt"]
    assert outside.exists()
    assert clear_previous_fit(tmp_path / "empty") == []  # no earlier fit: nothing to do
