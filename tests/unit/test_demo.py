"""`make demo` end to end on the fake embedder: its own checks (no leaks, refusal) must hold."""

from citadel.cli import demo


def test_demo_runs_and_its_checks_hold(tmp_path, monkeypatch):
    monkeypatch.setenv("CITADEL_EMBEDDING__BACKEND", "hash")
    monkeypatch.setattr(demo, "DEMO_HOME", tmp_path / "demo")
    monkeypatch.chdir(tmp_path)  # the generated PDF lands under the working directory
    demo.run_demo()
    assert (tmp_path / "examples" / "generated" / "acme" / "remote-work-guide.pdf").exists()
