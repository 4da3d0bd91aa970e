"""Settings come from LUMINAL_* variables; the database defaults to a SQLite file under the data dir."""

from pathlib import Path

import pytest
from pydantic import ValidationError

from luminal.store.settings import Settings


def test_defaults_put_everything_under_the_data_dir(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("LUMINAL_DATA_DIR", str(tmp_path))
    s = Settings()
    assert s.resolved_database_url == f"sqlite:///{tmp_path / 'luminal.db'}"
    assert s.artifacts_dir.parent == tmp_path and s.spool_dir.parent == tmp_path


def test_environment_overrides(monkeypatch):
    monkeypatch.setenv("LUMINAL_DATABASE_URL", "postgresql+psycopg://u@db/luminal")
    monkeypatch.setenv("LUMINAL_MAX_UPLOAD_BYTES", "1234")
    monkeypatch.setenv("LUMINAL_GPU_PRICES_PER_SECOND", '{"h100": 0.002}')
    monkeypatch.setenv("LUMINAL_BOOTSTRAP_KEY", "lm_" + "k" * 30)
    s = Settings()
    assert s.resolved_database_url == "postgresql+psycopg://u@db/luminal"
    assert s.max_upload_bytes == 1234
    assert s.gpu_prices_per_second == {"h100": 0.002}
    assert s.bootstrap_key == "lm_" + "k" * 30


@pytest.mark.parametrize("var,value", [("LUMINAL_MAX_UPLOAD_BYTES", "0"), ("LUMINAL_BOOTSTRAP_KEY", "short")])
def test_bad_values_are_refused(monkeypatch, var, value):
    monkeypatch.setenv(var, value)
    with pytest.raises(ValidationError):
        Settings()
