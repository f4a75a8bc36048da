// The tictactoe sample's view: a board on which you play against the model. You pick
// your side (X moves first); after each of your moves the model answers through
// ctx.call("move", {cells, player}) (page/samples/tictactoe.py, the attached inference
// graph), and the cells it did not pick are shaded by its probabilities. Below: the
// results of show()'s 1,000 games against the uniformly random player.

const LINES = [[0, 1, 2], [3, 4, 5], [6, 7, 8], [0, 3, 6], [1, 4, 7], [2, 5, 8], [0, 4, 8], [2, 4, 6]];
const SVG = "http://www.w3.org/2000/svg";

// module state: the game survives re-renders (resize, every "view" event)
const game = { cells: Array(9).fill(0), human: 1, thinking: false, probs: null, last: null, message: "", result: "" };
let root = null;  // the board's container in the current render
let context = null;

function winner(c) {
  for (const [a, b, d] of LINES) if (c[a] && c[a] === c[b] && c[a] === c[d]) return { side: c[a], line: [a, b, d] };
  return null;
}
const full = (c) => c.every((v) => v !== 0);
const mark = (v) => (v === 1 ? "X" : v === -1 ? "O" : "");
const toMove = (c) => (c.filter((v) => v !== 0).length % 2 === 0 ? 1 : -1);

function over() {
  const w = winner(game.cells);
  if (w) {
    game.result = w.side === game.human ? "win" : "loss";
    game.message = w.side === game.human ? "You win!" : "The model wins.";
    return true;
  }
  if (full(game.cells)) { game.result = "draw"; game.message = "A draw."; return true; }
  game.result = "";
  return false;
}

async function modelMove() {
  const player = -game.human;
  game.thinking = true;
  game.message = context && context.running ? "The model moves once training pauses…" : "The model is thinking…";
  draw();
  try {
    const r = await context.call("move", { cells: game.cells, player });
    if (game.cells[r.move] !== 0 || toMove(game.cells) !== player) throw new Error(`illegal reply ${r.move}`);
    game.cells[r.move] = player;
    game.last = r.move;
    game.probs = r.probs;
    if (!over()) game.message = `Your move (${mark(game.human)}). The model played ${cellName(r.move)}.`;
  } catch (e) {
    game.message = `The model could not move: ${e.message || e}`;
  } finally {
    game.thinking = false;
    draw();
  }
}

function cellName(i) {
  return `row ${Math.floor(i / 3) + 1}, column ${(i % 3) + 1}`;
}

function play(i) {
  if (game.thinking || game.result || game.cells[i] !== 0 || toMove(game.cells) !== game.human) return;
  game.cells[i] = game.human;
  game.last = i;
  game.probs = null;
  if (over()) { draw(); return; }
  modelMove();
}

function newGame(human) {
  if (game.thinking) return;
  Object.assign(game, { cells: Array(9).fill(0), human, probs: null, last: null, result: "" });
  if (human === 1) { game.message = "Your move (X): click a cell."; draw(); } else modelMove();
}

function markSvg(v, win) {
  const s = document.createElementNS(SVG, "svg");
  s.setAttribute("viewBox", "0 0 100 100");
  s.setAttribute("aria-hidden", "true");
  Object.assign(s.style, { width: "70%", height: "70%" });
  const color = win ? "var(--accent)" : v === 1 ? "var(--text, #1d2430)" : "var(--muted-strong)";
  const add = (tag, attrs) => {
    const e = document.createElementNS(SVG, tag);
    for (const [k, val] of Object.entries(attrs)) e.setAttribute(k, val);
    e.setAttribute("stroke", color); e.setAttribute("stroke-width", "11"); e.setAttribute("fill", "none");
    e.setAttribute("stroke-linecap", "round");
    s.append(e);
  };
  if (v === 1) { add("line", { x1: 18, y1: 18, x2: 82, y2: 82 }); add("line", { x1: 82, y1: 18, x2: 18, y2: 82 }); }
  else add("circle", { cx: 50, cy: 50, r: 33 });
  return s;
}

/** The board, the status line and the controls, redrawn from `game` into root. */
function draw() {
  if (!root || !root.isConnected) return;
  const board = root.querySelector(".ttt-board");
  const w = winner(game.cells);
  board.replaceChildren();
  game.cells.forEach((v, i) => {
    const b = document.createElement("button");
    b.type = "button";
    b.className = "ttt-cell";
    b.dataset.cell = String(i);
    b.dataset.mark = mark(v);
    b.setAttribute("aria-label", `${cellName(i)}: ${v ? mark(v) : "empty"}`);
    const mine = toMove(game.cells) === game.human;
    b.disabled = v !== 0 || !!game.result || game.thinking || !mine;
    Object.assign(b.style, { aspectRatio: "1", display: "flex", alignItems: "center", justifyContent: "center",
      padding: "0", border: "2px solid var(--line)", borderRadius: "6px", background: "#fff", cursor: b.disabled ? "default" : "pointer" });
    if (v) b.append(markSvg(v, w && w.line.includes(i)));
    else if (game.probs) {  // what the model thought of the cells it did not take
      const p = game.probs[i] || 0;
      b.style.background = `rgba(36, 86, 201, ${Math.min(0.35, p * 0.9).toFixed(3)})`;
      b.title = `the model gave this cell ${(100 * p).toFixed(1)} %`;
    }
    if (i === game.last) b.style.borderColor = "var(--accent-faint)";
    b.addEventListener("click", () => play(i));
    board.append(b);
  });
  const st = root.querySelector("#ttt-status");
  st.textContent = game.message;
  st.dataset.result = game.result;
  st.dataset.thinking = String(game.thinking);
}

function bar(results) {
  const { won, drawn, lost } = results, n = won + drawn + lost || 1;
  const s = document.createElementNS(SVG, "svg");
  s.setAttribute("viewBox", "0 0 300 18");
  s.setAttribute("preserveAspectRatio", "none");
  s.setAttribute("role", "img");
  s.setAttribute("aria-label", `against the random player: won ${won}, drew ${drawn}, lost ${lost} of ${n}`);
  Object.assign(s.style, { width: "100%", maxWidth: "420px", height: "18px", display: "block", margin: ".3rem 0" });
  let x = 0;
  for (const [v, color] of [[won, "var(--accent)"], [drawn, "var(--accent-faint)"], [lost, "#c62828"]]) {
    const r = document.createElementNS(SVG, "rect");
    r.setAttribute("x", String(x)); r.setAttribute("y", "0"); r.setAttribute("height", "18");
    r.setAttribute("width", String(300 * v / n)); r.setAttribute("fill", color);
    s.append(r);
    x += 300 * v / n;
  }
  return s;
}

export function render(body, view, ctx) {
  context = ctx;
  const v = view.tictactoe;
  if (!v) { ctx.parts(body, view); return; }
  root = document.createElement("section");
  root.className = "ttt";
  root.setAttribute("aria-label", "play tic-tac-toe against the model");
  const h = document.createElement("h3"); h.textContent = "Play against the model";
  const controls = document.createElement("div");
  Object.assign(controls.style, { display: "flex", gap: ".5rem", alignItems: "center", flexWrap: "wrap", marginBottom: ".6rem" });
  const asX = document.createElement("button");
  asX.type = "button"; asX.id = "ttt-new-x"; asX.textContent = "New game: you play X (first)";
  asX.addEventListener("click", () => newGame(1));
  const asO = document.createElement("button");
  asO.type = "button"; asO.id = "ttt-new-o"; asO.textContent = "New game: you play O (second)";
  asO.addEventListener("click", () => newGame(-1));
  controls.append(asX, asO);
  const board = document.createElement("div");
  board.className = "ttt-board";
  board.setAttribute("role", "grid");
  board.setAttribute("aria-label", "the board, 3 by 3");
  Object.assign(board.style, { display: "grid", gridTemplateColumns: "repeat(3, 1fr)", gap: "6px",
    width: "min(100%, 270px)" });
  const status = document.createElement("p");
  status.id = "ttt-status"; status.setAttribute("aria-live", "polite");
  Object.assign(status.style, { fontWeight: "600", margin: ".6rem 0" });
  const h2 = document.createElement("h3"); h2.textContent = `Against the random player (after step ${v.step})`;
  const { won, drawn, lost } = v.results;
  const sum = document.createElement("p");
  sum.className = "muted"; sum.id = "ttt-results";
  sum.textContent = `1,000 games, half with the model moving first, always its most probable move: ` +
    `won ${won}, drew ${drawn}, lost ${lost}.`;
  root.append(h, controls, board, status, h2, bar(v.results), sum);
  body.append(root);
  if (!game.message) game.message = "Your move (X): click a cell.";
  draw();
}
