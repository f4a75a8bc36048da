// The samples of the trainer page, in gallery order. A sample is its Python source
// (page/samples/<name>.py, fetched when the sample is first opened), these lines, and
// optionally a view module of its own (page/views/<name>.mjs: render(body, view, ctx),
// see app.mjs's viewContext) for what the shared parts of page/view.mjs cannot draw.
import * as canvas from "./views/canvas.mjs";
import * as cartpole from "./views/cartpole.mjs";
import * as flow from "./views/flow.mjs";
import * as kan from "./views/kan.mjs";
import * as llama from "./views/llama.mjs";
import * as nerf from "./views/nerf.mjs";
import * as shakespeare from "./views/shakespeare.mjs";
import * as tictactoe from "./views/tictactoe.mjs";
import * as vae from "./views/vae.mjs";

export const SAMPLES = [
  { name: "sin", title: "sin", kind: "MLP regression", steps: 1000,
    blurb: "An MLP (1→64→64→1) fits y = sin x. The view plots the fit against sin x." },
  { name: "addition", title: "addition", kind: "transformer", steps: 1500,
    blurb: "A 3-block transformer learns two-digit addition; accuracy on held-out pairs and an attention map." },
  { name: "digits", title: "digits", kind: "CNN", steps: 1500,
    blurb: "A small CNN reads 8×8 handwritten digits; predictions on test images." },
  { name: "names", title: "names", kind: "character LM", steps: 1500,
    blurb: "A character-level transformer learns first names and makes up new ones." },
  { name: "kan", title: "kan", kind: "Kolmogorov–Arnold net", steps: 1000, viewer: kan,
    blurb: "A Kolmogorov–Arnold network learns sin(πx) with B-spline edge functions. The view plots the fit and every learned edge." },
  { name: "canvas", title: "canvas", kind: "MLP classifier", steps: 1500, viewer: canvas,
    blurb: "An MLP with dropout learns the 8×8 digits. Draw a digit on the canvas and watch its predicted probabilities live." },
  { name: "vae", title: "vae", kind: "variational autoencoder", steps: 2000, viewer: vae,
    blurb: "A VAE with a 2-D latent learns the digits. The view shows reconstructions and digits decoded across the latent plane." },
  { name: "flow", title: "flow", kind: "flow matching", steps: 2000, viewer: flow,
    blurb: "A small conv net learns a velocity field that carries noise to digits. The view shows samples integrated with Euler steps." },
  { name: "nerf", title: "nerf", kind: "Fourier-feature MLP", steps: 1000, viewer: nerf,
    blurb: "An MLP on Fourier features learns an image from pixel coordinates. Drop your own image on the view to fit it instead." },
  { name: "cartpole", title: "cartpole", kind: "policy gradient", steps: 300, viewer: cartpole,
    blurb: "REINFORCE teaches a policy to balance a pole on a cart, 16 environments at once. The view animates an episode." },
  { name: "tictactoe", title: "tictactoe", kind: "self-play RL", steps: 2000, viewer: tictactoe,
    blurb: "A policy learns tic-tac-toe from games against itself and against random players. Play against it on the board." },
  { name: "llama", title: "llama", kind: "Llama-style LM", steps: 1500, viewer: llama,
    blurb: "A small Llama (RMSNorm, rotary embeddings, SwiGLU) learns first names. Sample new ones at the temperature you set." },
  { name: "shakespeare", title: "shakespeare", kind: "GPT, 10.7M parameters", steps: 5000, viewer: shakespeare,
    blurb: "nanoGPT's character-level GPT learns the tiny-shakespeare text. The view streams text the model writes as it trains." },
  { name: "torchgpt", title: "torchgpt", kind: "PyTorch code", steps: 1500,
    blurb: "A small GPT written as PyTorch code (import tgweb.torch as torch) learns first names, with torch.optim's AdamW and a cosine lr scheduler." },
];
