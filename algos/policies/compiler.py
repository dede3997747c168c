"""torch.compile for the policy's elementwise work, and eager wherever the compiler fails.

Between the matmuls of a decoder layer sit kernels that each read and write a whole
activation: RMSNorm's float32 steps, the rotary embedding, SwiGLU's ``silu(gate) * up``,
the residual adds (and their backwards).  On an H200 (2026-12-04) the update's
multiplications, copies, adds and fills together took about as much device time as its
matmuls.  Compiled, each run of them fuses into a kernel or two.

Two things compile, each with ``dynamic=True`` so one graph serves every batch and length:

- a chunk of the vocabulary's log-softmax, entropy and written gradient (``run_compiled``);
- each decoder layer of a scoring pass (``run_decoder``), one graph shared by all the
  layers.  Only the pass itself runs compiled: decoding (its CUDA graph) keeps the eager
  layers.

A compile that fails (no working Triton or C compiler, a layer dynamo cannot trace) leaves
everything eager from then on, with one warning; an error of the model's own is then raised
by the eager call.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from typing import Any, Callable

import torch
from torch import nn
from torch._functorch import config as autograd_config
from torch.fx.experimental import _config as shapes_config

_FAILURE: str | None = None  # why the compiled parts run eager in this process (see ``failure``)


def run_compiled(fn: Callable, compiled: bool, *args):
    """``fn(*args)``, through its compiled form where ``compiled`` and the compiler works here."""
    if compiled and _FAILURE is None:
        try:
            with _compile_settings():
                return _compiled(fn)(*args)
        except torch._dynamo.exc.TorchDynamoException as error:  # a model's own error recurs in the eager call
            _eager_from_now(error, fn.__name__)
    return fn(*args)


def run_decoder(decoder: nn.Module, compiled: bool, **inputs: Any) -> Any:
    """``decoder(**inputs)`` with each of its layers compiled where ``compiled`` and the compiler works here.

    The layers compile only for this call: outside it (decoding, a checkpoint's recompute
    after it) they are eager.  So a backward that recomputes layers (gradient
    checkpointing) must not ask for compiled ones.
    """
    layers = getattr(decoder, "layers", None)
    if compiled and _FAILURE is None and isinstance(layers, nn.ModuleList) and len(layers):
        try:
            with _layers_compiled(layers), _compile_settings():
                return decoder(**inputs)
        except torch._dynamo.exc.TorchDynamoException as error:  # a model's own error recurs in the eager call
            _eager_from_now(error, type(layers[0]).__name__)
    return decoder(**inputs)


def failure() -> str | None:
    """Why the compiled parts run eager in this process, or None while they compile: a run's report can say so."""
    return _FAILURE


def _eager_from_now(error: Exception, what: str) -> None:
    global _FAILURE
    _FAILURE = f"torch.compile failed on {what}; the compiled parts run eager from now on: {error}"[:500]
    warnings.warn(_FAILURE, stacklevel=3)


@contextlib.contextmanager
def _compile_settings():
    """What a compile started here runs under.

    - No duck sizing: a length or batch that happens to equal a static size (the head dim,
      the key/value heads) is not assumed equal to it, so the graph stays dynamic in it
      instead of being specialised to that value and compiled again at the next micro-batch.
    - Room for 32 graphs of one function, not dynamo's 8: the layers' call has one per
      dtype, gradient mode, train or eval mode, and batch of one row or more (the policy's
      and the reference's passes and the update take six; the check's variants more).
      Past the limit dynamo would run the layers eager, silently slower.
    - The backward built with the forward, always: AOTAutograd otherwise puts off a backward
      whose build failed until the first ``backward()``, where no fallback is left (the
      forward has run compiled).  Built here, its failure is the forward's, and falls back.
      Torch releases without the switch keep their own behaviour.
    """
    backward_now = ({"force_non_lazy_backward_lowering": True}
                    if hasattr(autograd_config, "force_non_lazy_backward_lowering") else {})
    with (shapes_config.patch(use_duck_shape=False), torch._dynamo.config.patch(recompile_limit=32),
          autograd_config.patch(**backward_now)):
        yield


@functools.cache
def _compiled(fn: Callable) -> Callable:
    return torch.compile(fn, dynamic=True)  # chunks differ in length: one graph for all


@functools.cache
def _compiled_module_call() -> Callable:
    """A module's call, compiled once for every layer: the layers share their code, and dynamo their graph."""
    return torch.compile(nn.Module._call_impl, dynamic=True)


@contextlib.contextmanager
def _layers_compiled(layers: nn.ModuleList):
    """Each layer's call through ``_compiled_module_call`` (torch's slot for ``Module.compile``), then eager again."""
    call = _compiled_module_call()
    for layer in layers:
        layer._compiled_call_impl = functools.partial(call, layer)
    try:
        yield
    finally:
        for layer in layers:
            layer._compiled_call_impl = None
