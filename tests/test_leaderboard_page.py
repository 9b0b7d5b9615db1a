"""The HTML leaderboard in a real browser (Debian's chromium through Playwright): it loads from file://
without a console error or a network request, a header click sorts a table, a heatmap cell's hover
shows the question, and a screenshot is kept. Built from synthetic runs and from real CLI runs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from cli import run_cli
from conftest import compose_config
from test_leaderboard import build_store, sample_items, wrong_letter

CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"no chromium at {CHROMIUM} (make installs Debian's package)")
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="playwright is not installed (pip install -e '.[dev]')"
    )
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield launched
        launched.close()


class LoadedPage:
    """A page opened from file:// with every request and console error recorded."""

    def __init__(self, browser, path: Path):
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.page = browser.new_page(viewport={"width": 1400, "height": 1000})
        self.page.on("request", lambda request: self.requests.append(request.url))
        self.page.on("console", lambda message: message.type == "error" and self.errors.append(message.text))
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.goto(path.as_uri())
        self.page.wait_for_selector("body[data-rendered=done]", timeout=20000)

    def column(self, table: str, header: str) -> list[str]:
        """The texts of column ``header`` of table ``table``, top to bottom."""
        headers = self.page.eval_on_selector_all(f"#{table} th", "ths => ths.map(th => th.textContent)")
        index = headers.index(header)
        return self.page.eval_on_selector_all(
            f"#{table} tbody tr", f"rows => rows.map(r => r.cells[{index}].textContent.trim())"
        )

    def table_after(self, title: str) -> str:
        """The id of the table under the heading ``title``."""
        return self.page.evaluate(
            "title => [...document.querySelectorAll('h3')].find(h => h.textContent === title)"
            ".nextElementSibling.nextElementSibling.querySelector('table').id",
            title,
        )

    def plot(self, title: str):
        """The figure whose title is ``title``."""
        found = [
            p for p in self.page.query_selector_all("div.plot") if p.query_selector(".gtitle").text_content() == title
        ]
        assert len(found) == 1, f"no figure titled {title!r}"
        return found[0]

    def hover_cell(self, plot, row: int, col: int, rows: int, cols: int) -> str:
        """Move the mouse over cell (row, col) of a heatmap of rows x cols (row 0 on top); the hover label's text."""
        self.page.mouse.move(0, 0)  # off the plot: the last hover label goes before the next is read
        plot.wait_for_selector(".hoverlayer .hovertext", state="detached", timeout=5000)
        plot.evaluate("e => e.scrollIntoView({block: 'start'})")
        box = plot.query_selector(".nsewdrag").bounding_box()
        self.page.mouse.move(
            box["x"] + (col + 0.5) * box["width"] / cols, box["y"] + (row + 0.5) * box["height"] / rows
        )
        label = plot.wait_for_selector(".hoverlayer .hovertext", timeout=5000)
        return label.text_content()


def test_page_from_synthetic_runs_sorts_hovers_and_fetches_nothing(browser, tmp_path, empty_db):
    from esgexp.leaderboard.board import export

    runs = build_store(tmp_path, empty_db)
    export(runs["uri"], tmp_path / "board", formats=("html",))
    loaded = LoadedPage(browser, tmp_path / "board" / "index.html")
    assert loaded.errors == [] and loaded.requests and all(url.startswith("file://") for url in loaded.requests)

    table = loaded.table_after("esg_sample · mcq")
    headers = loaded.page.eval_on_selector_all(f"#{table} th", "ths => ths.map(th => th.textContent)")
    assert "fine-tuned from" not in headers and "retriever" not in headers  # no run of the group fills them
    assert loaded.column(table, "model") == [
        "beta-1b",
        "alpha-7b",
        "beta-1b",
        "gamma-0.5b",
    ]  # best first: 47/48, 46, 45, 12
    size = headers.index("size (B)") + 1
    loaded.page.click(f"#{table} th:nth-child({size})")  # ascending
    assert loaded.column(table, "size (B)") == ["0.5", "1.0", "1.0", "7.0"]
    loaded.page.click(f"#{table} th:nth-child({size})")
    assert loaded.column(table, "size (B)") == ["7.0", "1.0", "1.0", "0.5"]
    assert loaded.column(table, "model") == ["alpha-7b", "beta-1b", "beta-1b", "gamma-0.5b"]
    loaded.page.fill(f"input[data-table={table}]", "zero_shot beta")
    assert loaded.page.eval_on_selector_all(f"#{table} tbody tr:not([hidden])", "rows => rows.length") == 1
    marks = dict(
        zip(
            zip(loaded.column(table, "model"), loaded.column(table, "strategy")),
            loaded.column(table, "not worse than best"),
        )
    )
    assert marks == {
        ("beta-1b", "context"): "best",
        ("alpha-7b", "zero_shot"): "✓",
        ("beta-1b", "zero_shot"): "✓",
        ("gamma-0.5b", "zero_shot"): "✗",
    }
    assert loaded.column(table, "accuracy ± 95% CI")[0] == "0.958 ± 0.064 [0.860, 0.988]"  # alpha: Wilson on 46/48

    # The zero-shot heatmap: alpha (rank 1) on top, the question all three miss in the last column.
    plot = loaded.plot("esg_sample: models × questions (zero_shot, generate; 3 models, 48 questions)")
    last = sample_items()[47]
    text = loaded.hover_cell(plot, row=0, col=47, rows=3, cols=48)
    assert "alpha-7b · rank 1 of 3 (accuracy 0.958)" in text
    assert f"question {last.id} · difficulty 1.00" in text and last.question[:40] in text
    assert f"gold: {last.answer} · answer: {wrong_letter(last.answer)}" in text
    text = loaded.hover_cell(plot, row=1, col=0, rows=3, cols=48)
    assert "beta-1b · rank 2 of 3" in text and "difficulty 0.00" in text

    cards = loaded.page.query_selector_all("details.card")
    assert len(cards) == 7
    card = loaded.page.query_selector(f"#card-{runs['alpha']}").inner_text()
    for expected in (
        "Question: {query}",
        "scoring.max_new_tokens = 16",
        "0123abc",
        "torch 2.13.0",
        "ab" * 32,
        "backend.name = hf",
    ):
        assert expected in loaded.page.eval_on_selector(f"#card-{runs['alpha']}", "e => e.textContent"), expected
    assert card  # the summary line
    titles = loaded.page.eval_on_selector_all(".gtitle", "ts => ts.map(t => t.textContent)")
    for wanted in (
        "accuracy per framework",
        "model size against accuracy",
        "calibration",
        "recall@K per retriever",
        "open QA per question type",
        "open QA by number of gold spans",
        "esgbench_sample: accuracy per category",
    ):
        assert any(wanted in title for title in titles), wanted
    loaded.page.screenshot(path=str(tmp_path / "leaderboard.png"), full_page=False)
    assert (tmp_path / "leaderboard.png").stat().st_size > 10_000


def test_page_from_a_real_cli_run_on_the_bundled_sample(browser, tiny_cfg, tmp_path, clean_env, empty_db):
    """A tiny-Llama job on the bundled sample whose run folder is then gone (the page reads its MLflow
    artifacts), and the leaderboard command as a user runs it."""
    from esgexp.run import run_job

    (tmp_path / "mlruns").mkdir()
    shutil.copy(empty_db, tmp_path / "mlruns" / "mlflow.db")  # the job's store, its tables already made
    run_job(tiny_cfg("scoring=logprob", "dataset.limit=6", f"paths.output_dir={tmp_path}/runs/a"))
    shutil.rmtree(tmp_path / "runs")
    uri = compose_config(tmp_path, name="leaderboard").tracking.uri
    out = run_cli(
        "esgexp.leaderboard",
        f"tracking.uri={uri}",
        "format=html",
        cwd=tmp_path,
        env=clean_env,
    )
    assert out.returncode == 0, out.stderr
    page_file = tmp_path / "leaderboard" / "index.html"
    assert out.stdout.strip() == f"written: {page_file}" and not (tmp_path / "leaderboard" / "leaderboard.csv").exists()
    loaded = LoadedPage(browser, page_file)
    assert loaded.errors == [] and all(url.startswith("file://") for url in loaded.requests)
    heatmap = loaded.plot("esg_sample: models × questions (zero_shot, logprob; 1 models, 6 questions)")
    text = loaded.hover_cell(heatmap, row=0, col=0, rows=1, cols=6)
    assert "local · rank 1 of 1" in text and "difficulty" in text and "A: " in text and "gold: " in text
    loaded.plot("esg_sample: calibration (logprob scoring)")  # calibration.json, from the artifacts too
    [card] = loaded.page.eval_on_selector_all("details.card", "cards => cards.map(c => c.textContent)")
    assert "You are an expert in ESG" in card and "scoring.name = logprob" in card
    assert "data file sha256" in card and "torch " in card and "not recorded" not in card
    loaded.page.screenshot(path=str(tmp_path / "cli-leaderboard.png"))
