"""The tictactoe view in headless Chromium: you play against the model by clicking
cells; the model answers each move with a legal move of its own (through the page
script and the attached inference graph), the board and the status show the game, a
finished game says who won, and New game lets the model open when you play O."""

from __future__ import annotations

from .conftest import open_sample, screenshot, train_app

LINES = [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)]


def board(page) -> list[str]:
    return page.eval_on_selector_all(".ttt-cell", "bs => bs.map(b => b.dataset.mark)")


def wait_for_model(page):
    page.wait_for_function(
        "document.getElementById('ttt-status').dataset.thinking === 'false'", timeout=60000
    )


def winner(cells):
    for a, b, c in LINES:
        if cells[a] and cells[a] == cells[b] == cells[c]:
            return cells[a]
    return ""


def test_play_a_game_against_the_model(app):
    page = app
    open_sample(page, "tictactoe")
    train_app(page, 20, timeout=240)
    page.click("#ttt-new-x")
    assert board(page) == [""] * 9
    moves = 0
    while True:
        cells = board(page)
        if winner(cells) or all(cells):
            break
        empty = [i for i, m in enumerate(cells) if not m]
        mine = 4 if 4 in empty else empty[0]
        page.click(f'.ttt-cell[data-cell="{mine}"]')
        wait_for_model(page)
        after = board(page)
        assert after[mine] == "X", after
        moves += 1
        if winner(after) or all(after):
            break
        # the model answered with exactly one O on a cell that was empty
        new = [i for i in range(9) if after[i] != cells[i] and i != mine]
        assert len(new) == 1 and after[new[0]] == "O" and not cells[new[0]], (cells, after)
        assert after.count("X") == after.count("O")
        assert "Your move (X)" in page.inner_text("#ttt-status")
    final = board(page)
    result = page.get_attribute("#ttt-status", "data-result")
    want = {"X": "win", "O": "loss", "": "draw"}[winner(final)]
    assert result == want, (final, result)
    assert page.inner_text("#ttt-status") in ("You win!", "The model wins.", "A draw.")
    assert moves >= 3
    # every cell is disabled once the game is over
    assert page.eval_on_selector_all(".ttt-cell", "bs => bs.every(b => b.disabled)")
    screenshot(page, "tictactoe-game")
    # you play O: the model opens
    page.click("#ttt-new-o")
    wait_for_model(page)
    cells = board(page)
    assert cells.count("X") == 1 and cells.count("O") == 0, cells
    assert "Your move (O)" in page.inner_text("#ttt-status")
    free = cells.index("")
    page.click(f'.ttt-cell[data-cell="{free}"]')
    wait_for_model(page)
    cells = board(page)
    assert cells[free] == "O" and cells.count("X") == 2 and cells.count("O") == 1, cells
    screenshot(page, "tictactoe-model-first")
    assert not [p for p in page.problems if "pageerror" in p], page.problems
