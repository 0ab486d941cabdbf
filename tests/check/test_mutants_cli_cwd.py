"""`dmocker check --mutants` runs the catalogue shipped in the package, from any folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dmocker.check import mutants
from dmocker.cli.check import main


def test_mutants_runs_from_another_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)  # no tests/mutants here
    calls: list[str] = []
    real = mutants.run_mutant

    def first_two_only(m: mutants.Mutant, *args: object, **kwargs: object) -> mutants.MutantResult:
        calls.append(m.name)
        if len(calls) > 2:  # the whole catalogue is test_mutants_killed's job; this is about finding it
            return mutants.MutantResult(m, ())
        return real(m, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr("dmocker.cli.check.run_mutant", first_two_only)
    code = main(["check", "--mutants", "--order", "source-first"])
    captured = capsys.readouterr()
    assert "not a mutant catalogue" not in captured.err
    assert len(calls) > 10, captured.err
    assert "start_after_terminal_submits" in captured.out
    assert code == 1  # the stubbed mutants "survive"; the exit code says so


def test_the_catalogue_is_package_code() -> None:
    from dmocker.check import mutant_catalogue

    assert mutant_catalogue.MUTANTS == mutants.load_catalogue()
    assert Path(mutant_catalogue.__file__).parent == Path(mutants.DEFAULT_CATALOGUE)


def test_console_script_finds_the_catalogue_from_elsewhere(tmp_path: Path) -> None:
    code = "from dmocker.check.mutants import load_catalogue; print(len(load_catalogue()))"
    env = dict(os.environ)
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert int(run.stdout) > 10
