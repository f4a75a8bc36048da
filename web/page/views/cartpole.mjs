// The cartpole sample's view: PLACEHOLDER until the sample lands; draws only the shared parts.
export function render(body, view, ctx) {
  ctx.parts(body, view);
}
