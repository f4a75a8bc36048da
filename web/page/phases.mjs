// The trainer page's status line while it waits: what it is waiting for (downloading and
// compiling Pyodide, starting Python, compiling the model, compiling kernels, the first
// step) and for how long, ticking, with the phases already past and their times. app.mjs
// calls next() as the worker announces each phase ("startup" and "phase" events) and
// end() when the wait is over (Ready, the first loss).

const secs = (ms) => `${(ms / 1000).toFixed(1)} s`;

export class Phases {
  /** show(text, kind): sets the status line. */
  constructor(show) {
    this.show = show;
    this.timer = null;
    this.list = [];
    this.label = "";
  }

  get active() {
    return this.timer !== null;
  }

  /** A new wait, titled label ("sin: "), in its first phase. */
  begin(label, text) {
    this.label = label;
    this.list = [];
    this.t0 = performance.now();
    this.next(text);
    if (this.timer === null) this.timer = setInterval(() => this.render(), 100);
  }

  /** The wait moves on to the phase text (at: when, on the page's clock; default now). */
  next(text, at = performance.now()) {
    const cur = this.list[this.list.length - 1];
    if (cur && cur.text === text) return;
    if (cur) cur.ms = Math.max(0, at - cur.at);
    this.list.push({ text, at });
    this.render();
  }

  /** "phase 0.4 s, phase 1.2 s" of the phases past (all of them, once ended). */
  summary() {
    return this.list.filter((p) => p.ms != null).map((p) => `${p.text} ${secs(p.ms)}`).join(", ");
  }

  render() {
    const cur = this.list[this.list.length - 1];
    if (!cur) return;
    const past = this.summary();
    this.show(`${this.label}${cur.text}… ${secs(performance.now() - cur.at)}` + (past ? ` (after ${past})` : ""),
      "busy");
  }

  /** The wait is over: the summary of every phase, and the whole wait in ms. */
  end() {
    clearInterval(this.timer);
    this.timer = null;
    const now = performance.now();
    const cur = this.list[this.list.length - 1];
    if (cur && cur.ms == null) cur.ms = now - cur.at;
    return { summary: this.summary(), ms: now - this.t0, phases: this.list.map(({ text, ms }) => ({ text, ms })) };
  }
}
