"""tgweb.optim: optimizers, clipping and learning-rate schedules, all graph
transformations or host-side data (see tgweb.compile for how they are applied)."""

from . import schedules  # noqa: F401
from .adaptive import Adadelta, Adagrad, RMSprop  # noqa: F401
from .clip import F32_MAX, global_sumsq  # noqa: F401
from .optimizers import SGD, Adam, AdamW, Optimizer, ParamInfo, from_spec  # noqa: F401
from .schedules import Constant, Cosine, Linear, MultiStep, OneCycle, Schedule, Sequence, Step, Warmup  # noqa: F401
