"""Seed 003's minimal attention classifier, forward, backward and SGD, with correct math.

Architecture (reference layout, tokens as rows, float64 throughout; float32 arrays in keep every
stage in float32, for the float32 tier)::

    x        = [x_emb | 0..n-1]                    (n, d)   d = e + 1: a positional column appended
    q, k, v  = x W_q + b_q, x W_k + b_k, x W_v + b_v  (n, d)   W_* are (d, d), b_* length d
    weights  = softmax_rows(q k^T / sqrt(d))       (n, n)   each row sums to 1
    z        = weights v                           (n, d)
    f        = z W_f + b_f                         (n, c)   W_f is (d, c), b_f length c
    pooled   = mean of the rows of f               (c,)
    probs    = softmax(pooled)                     (c,)
    loss     = -log probs[label]                   scalar   (computed as a stable log-softmax)

Seed 003 writes the same model feature-major (x is d x n, ``W*x``) and has three defects that this
module deliberately does *not* reproduce (see ``shared/seeds/README.md``): it scales the scores by
``sqrt(length(q)) = sqrt(d*n)`` instead of ``sqrt(d_k) = sqrt(d)``; its backward pass builds one
softmax Jacobian from the linearly indexed ``alpha[j]`` (the first column of the weights) and
applies it across every row, and drops the ``1/sqrt`` factor from dq and dk, so its query/key
gradients are wrong whenever n > 1; and it initialises ``V = K`` (one shared array).

Labels are 0-based class indices: ``negative = 0``, ``neutral = 1``, ``positive = 2`` (the seed's
one-hot vectors ``[1,0,0]``, ``[0,1,0]``, ``[0,0,1]``).

The functions named like an operation of ``attention_ports.spec.ops`` (``classifier_forward``,
``classifier_step``, ``classifier_train``) take their arguments under the operation's input and
option names, so the generic adapter can call them; ``train_classifier`` is the natural,
list-of-sentences form of ``classifier_train``.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

import numpy as np
from attention_ports.reference.attention import softmax
from attention_ports.reference.validate import check_finite, float_dtype

#: The parameter names, in the order every API and operation uses them.
PARAM_NAMES: tuple[str, ...] = ("w_q", "b_q", "w_k", "b_k", "w_v", "b_v", "w_f", "b_f")
#: Seed 003's class order: label index -> sentiment.
CLASS_NAMES: tuple[str, ...] = ("negative", "neutral", "positive")
#: Seed 003 trains with the feed-forward layer frozen (its W and b updates are commented out).
SEED_FROZEN: tuple[str, ...] = ("w_f", "b_f")


class ClassifierForward(NamedTuple):
    x: np.ndarray  # (n, d) embeddings with the positional column appended
    q: np.ndarray  # (n, d)
    k: np.ndarray  # (n, d)
    v: np.ndarray  # (n, d)
    weights: np.ndarray  # (n, n), rows sum to 1
    z: np.ndarray  # (n, d)
    f: np.ndarray  # (n, c)
    pooled: np.ndarray  # (c,)
    probs: np.ndarray  # (c,)


class ClassifierStep(NamedTuple):
    loss: float  # the loss *before* the update
    probs: np.ndarray  # (c,) the prediction before the update
    grads: dict[str, np.ndarray]  # gradient of every parameter, frozen ones included
    params: dict[str, np.ndarray]  # the parameters after the update (fresh arrays)


class ClassifierTraining(NamedTuple):
    epoch_losses: np.ndarray  # (epochs,) mean pre-update loss over the sentences trained
    params: dict[str, np.ndarray]  # the final parameters


# --------------------------------------------------------------------------------------------
# argument checks


def _check_x_emb(x_emb: object, name: str = "x_emb") -> np.ndarray:
    arr = np.asarray(x_emb, dtype=float_dtype(x_emb))
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValueError(
            f"{name} must be a 2-D matrix (n tokens x e embedding features) with n >= 1 and e >= 1; "
            f"got shape {arr.shape}"
        )
    check_finite(arr, name)
    return arr


def _check_params(params: object, name: str = "params") -> tuple[dict[str, np.ndarray], int, int]:
    """Return (params as float64 arrays, or float32 ones as they are; d, c) after checking names and shapes."""
    if not isinstance(params, Mapping):
        raise ValueError(f"{name} must be a mapping with keys {', '.join(PARAM_NAMES)}; got {type(params).__name__}")
    missing = [p for p in PARAM_NAMES if p not in params]
    extra = [str(p) for p in params if p not in PARAM_NAMES]
    if missing or extra:
        raise ValueError(
            f"{name} must have exactly the keys {', '.join(PARAM_NAMES)}; "
            f"missing {missing or 'none'}, unexpected {extra or 'none'}"
        )
    arrs = {p: np.asarray(params[p], dtype=float_dtype(params[p])) for p in PARAM_NAMES}
    shapes = ", ".join(f"{p} {arrs[p].shape}" for p in PARAM_NAMES)
    w_q = arrs["w_q"]
    if w_q.ndim != 2 or w_q.shape[0] != w_q.shape[1] or w_q.shape[0] < 2:
        raise ValueError(f"{name}: w_q must be a square (d x d) matrix with d = e + 1 >= 2; got {shapes}")
    d = w_q.shape[0]
    w_f = arrs["w_f"]
    if w_f.ndim != 2 or w_f.shape[0] != d or w_f.shape[1] < 1:
        raise ValueError(f"{name}: w_f must be (d x c) = ({d} x c) with c >= 1 classes; got {shapes}")
    c = w_f.shape[1]
    expected = {"w_q": (d, d), "w_k": (d, d), "w_v": (d, d), "b_q": (d,), "b_k": (d,), "b_v": (d,), "b_f": (c,)}
    for p, shape in expected.items():
        if arrs[p].shape != shape:
            raise ValueError(f"{name}: {p} must have shape {shape} (d = {d}, c = {c}); got {shapes}")
    for p in PARAM_NAMES:
        check_finite(arrs[p], f"{name}.{p}")
    return arrs, d, c


def _check_index(value: object, name: str, upper: int | None = None, lower: int = 0) -> int:
    """An integer (or an integral float, as arrays from fixtures carry them) in [lower, upper)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be an integer; got {value!r}")
    as_float = float(value)
    if not np.isfinite(as_float) or as_float != int(as_float):
        raise ValueError(f"{name} must be an integer; got {value!r}")
    idx = int(as_float)
    if idx < lower or (upper is not None and idx >= upper):
        bound = f"[{lower}, {upper - 1}]" if upper is not None else f">= {lower}"
        raise ValueError(f"{name} must be in {bound}; got {idx}")
    return idx


def _check_label(label: object, c: int, name: str = "label") -> int:
    if isinstance(label, np.ndarray):
        if label.shape not in ((), (1,)):
            raise ValueError(f"{name} must be a single 0-based class index; got an array of shape {label.shape}")
        label = label.reshape(()).item()
    return _check_index(label, f"{name} (0-based class index, {c} classes)", upper=c)


def _check_lr(lr: object) -> float:
    if isinstance(lr, (bool, np.bool_)) or not isinstance(lr, numbers.Real):
        raise ValueError(f"lr must be a finite real number >= 0; got {lr!r}")
    lr = float(lr)
    if not np.isfinite(lr) or lr < 0:
        raise ValueError(f"lr must be a finite real number >= 0; got {lr!r}")
    return lr


def _check_frozen(frozen: object) -> frozenset[str]:
    """``frozen``: parameter names left unchanged; a bare string is one name."""
    if frozen is None:
        return frozenset()
    if isinstance(frozen, str):
        frozen = (frozen,)
    elif isinstance(frozen, np.ndarray):
        frozen = frozen.reshape(-1).tolist()
    if not isinstance(frozen, Iterable):
        raise ValueError(f"frozen must be a collection of parameter names; got {frozen!r}")
    names = list(frozen)
    bad = [n for n in names if not isinstance(n, str) or n not in PARAM_NAMES]
    if bad:
        raise ValueError(f"frozen names unknown parameters {bad}; the parameters are {', '.join(PARAM_NAMES)}")
    return frozenset(names)


# --------------------------------------------------------------------------------------------
# the model


def init_classifier_params(e: int, num_classes: int = 3, seed: int = 0) -> dict[str, np.ndarray]:
    """Small random parameters for embeddings of size ``e`` (so d = e + 1), like seed 003.

    ``w_q``, ``w_k``, ``w_v`` (d x d) and ``w_f`` (d x num_classes) are standard normal / 100,
    drawn in that order from ``numpy.random.default_rng(seed)``; all biases are zero. Unlike the
    seed (``V = K``), ``w_v`` is its own draw: an initial ``w_v == w_k`` would hide a port that
    confuses the two, and every returned array is a separate object.
    """
    e = _check_index(e, "e (embedding size)", lower=1)
    num_classes = _check_index(num_classes, "num_classes", lower=1)
    d = e + 1
    rng = np.random.default_rng(seed)
    w_q = rng.standard_normal((d, d)) / 100
    w_k = rng.standard_normal((d, d)) / 100
    w_v = rng.standard_normal((d, d)) / 100
    w_f = rng.standard_normal((d, num_classes)) / 100
    return {
        "w_q": w_q,
        "b_q": np.zeros(d),
        "w_k": w_k,
        "b_k": np.zeros(d),
        "w_v": w_v,
        "b_v": np.zeros(d),
        "w_f": w_f,
        "b_f": np.zeros(num_classes),
    }


def with_positions(x_emb: np.ndarray) -> np.ndarray:
    """Append seed 003's positional feature: a last column holding 0, 1, ..., n-1."""
    x_emb = _check_x_emb(x_emb)
    n = x_emb.shape[0]
    return np.concatenate([x_emb, np.arange(n, dtype=x_emb.dtype)[:, None]], axis=1)


def _forward(x_emb: np.ndarray, p: dict[str, np.ndarray]) -> ClassifierForward:
    x = with_positions(x_emb)
    d = x.shape[1]
    q = x @ p["w_q"] + p["b_q"]
    k = x @ p["w_k"] + p["b_k"]
    v = x @ p["w_v"] + p["b_v"]
    weights = softmax((q @ k.T) / float(np.sqrt(d)), axis=-1)  # a Python float keeps float32 float32
    z = weights @ v
    f = z @ p["w_f"] + p["b_f"]
    pooled = f.mean(axis=0)
    probs = softmax(pooled)
    return ClassifierForward(x=x, q=q, k=k, v=v, weights=weights, z=z, f=f, pooled=pooled, probs=probs)


def _validated(x_emb: object, params: object) -> tuple[np.ndarray, dict[str, np.ndarray], int, int]:
    x_emb = _check_x_emb(x_emb)
    p, d, c = _check_params(params)
    if x_emb.shape[1] != d - 1:
        raise ValueError(
            f"x_emb has e = {x_emb.shape[1]} features but the parameters expect e = d - 1 = {d - 1} "
            f"(d = {d} includes the positional column); got x_emb {x_emb.shape}, w_q {p['w_q'].shape}"
        )
    return x_emb, p, d, c


def classifier_forward(x_emb: np.ndarray, params: Mapping[str, np.ndarray]) -> ClassifierForward:
    """Every stage of the forward pass for one sentence ``x_emb`` (n tokens x e features).

    ``params`` maps ``w_q b_q w_k b_k w_v b_v w_f b_f`` to arrays shaped as in the module
    docstring. Raises ``ValueError`` naming the argument and the shapes when they do not fit.
    """
    x_emb, p, _, _ = _validated(x_emb, params)
    return _forward(x_emb, p)


def _log_softmax(x: np.ndarray) -> np.ndarray:
    shifted = x - np.max(x)
    return shifted - np.log(np.sum(np.exp(shifted)))


def _backward(fw: ClassifierForward, label: int, p: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    n, d = fw.x.shape
    scale = float(1.0 / np.sqrt(d))  # a Python float keeps float32 float32
    d_pooled = fw.probs.copy()
    d_pooled[label] -= 1.0  # d loss / d pooled = probs - one_hot(label)
    d_f = np.broadcast_to(d_pooled / n, fw.f.shape)  # mean pooling: every row gets 1/n
    g_w_f = fw.z.T @ d_f
    g_b_f = d_f.sum(axis=0)
    d_z = d_f @ p["w_f"].T  # (n, d)
    d_weights = d_z @ fw.v.T  # (n, n)
    d_v = fw.weights.T @ d_z  # (n, d)
    # softmax Jacobian, one per row: dS_ij = A_ij (dA_ij - sum_l dA_il A_il)
    d_scores = fw.weights * (d_weights - np.sum(d_weights * fw.weights, axis=1, keepdims=True))
    d_q = (d_scores @ fw.k) * scale
    d_k = (d_scores.T @ fw.q) * scale
    return {
        "w_q": fw.x.T @ d_q,
        "b_q": d_q.sum(axis=0),
        "w_k": fw.x.T @ d_k,
        "b_k": d_k.sum(axis=0),
        "w_v": fw.x.T @ d_v,
        "b_v": d_v.sum(axis=0),
        "w_f": g_w_f,
        "b_f": g_b_f,
    }


def _loss_and_grads(x_emb: np.ndarray, label: int, p: dict[str, np.ndarray]):
    fw = _forward(x_emb, p)
    loss = float(-_log_softmax(fw.pooled)[label])
    return loss, fw, _backward(fw, label, p)


def classifier_loss_and_grads(
    x_emb: np.ndarray, label: int, params: Mapping[str, np.ndarray]
) -> tuple[float, dict[str, np.ndarray]]:
    """Cross-entropy loss ``-log softmax(pooled)[label]`` and its gradient for every parameter.

    ``label`` is the 0-based class index. The gradients are the exact analytic ones (per-row
    softmax Jacobian, the 1/sqrt(d) scale in dq and dk) and are correct for every n >= 1.
    """
    x_emb, p, _, c = _validated(x_emb, params)
    label = _check_label(label, c)
    loss, _, grads = _loss_and_grads(x_emb, label, p)
    return loss, grads


def _sgd(p: dict[str, np.ndarray], grads: dict[str, np.ndarray], lr: float, frozen: frozenset[str]):
    return {name: p[name].copy() if name in frozen else p[name] - lr * grads[name] for name in PARAM_NAMES}


def classifier_step(
    x_emb: np.ndarray,
    label: int,
    params: Mapping[str, np.ndarray],
    lr: float,
    frozen: Iterable[str] = (),
) -> ClassifierStep:
    """One SGD step on one sentence: ``new = old - lr * grad`` for every parameter not in ``frozen``.

    Returns the loss and probabilities *before* the update, every gradient (frozen parameters'
    included) and the updated parameters as new arrays (``params`` itself is never modified).
    ``frozen`` holds parameter names, e.g. seed 003's ``("w_f", "b_f")``.
    """
    x_emb, p, _, c = _validated(x_emb, params)
    label = _check_label(label, c)
    lr = _check_lr(lr)
    frozen_set = _check_frozen(frozen)
    loss, fw, grads = _loss_and_grads(x_emb, label, p)
    return ClassifierStep(loss=loss, probs=fw.probs, grads=grads, params=_sgd(p, grads, lr, frozen_set))


def _diverged(epoch: int, i: int, x_emb: np.ndarray, lr: float) -> ValueError:
    return ValueError(
        f"training diverged (non-finite scores, loss or parameters) in epoch {epoch + 1} at trained "
        f"sentence {i} (n = {x_emb.shape[0]}); lr = {lr} is too large"
    )


def _train(
    sentences: Sequence[tuple[np.ndarray, int]],
    p: dict[str, np.ndarray],
    lr: float,
    epochs: int,
    frozen: frozenset[str],
) -> ClassifierTraining:
    trained = [(x, y) for x, y in sentences if x.shape[0] > 0]
    if not trained and epochs > 0:
        raise ValueError(f"the dataset has {len(sentences)} sentences but none with at least one token")
    losses = np.empty(epochs)
    for epoch in range(epochs):
        total = 0.0
        for i, (x_emb, label) in enumerate(trained):
            with np.errstate(over="ignore", invalid="ignore"):
                try:
                    loss, _, grads = _loss_and_grads(x_emb, label, p)
                except ValueError as exc:  # the inputs were checked: only an overflow gets here
                    raise _diverged(epoch, i, x_emb, lr) from exc
                p = _sgd(p, grads, lr, frozen)
            if not (np.isfinite(loss) and all(np.all(np.isfinite(a)) for a in p.values())):
                raise _diverged(epoch, i, x_emb, lr)
            total += loss  # in dataset order, then divided by the count
        losses[epoch] = total / len(trained)
    return ClassifierTraining(epoch_losses=losses, params={name: p[name].copy() for name in PARAM_NAMES})


def _check_epochs(epochs: object) -> int:
    return _check_index(epochs, "epochs", lower=0)


def train_classifier(
    dataset: Iterable[tuple[np.ndarray, int]],
    params: Mapping[str, np.ndarray],
    lr: float,
    epochs: int,
    frozen: Iterable[str] = (),
) -> ClassifierTraining:
    """Seed 003's training loop: ``epochs`` passes over ``dataset`` in order, one SGD step per sentence.

    ``dataset`` holds ``(x_emb, label)`` pairs (extra trailing items, such as the sentence text
    that ``reference.sentiment.load_dataset`` adds, are ignored). A sentence with zero tokens
    (shape ``(0, e)``) is skipped, like the seed's ``if length(sen) != 0``. Each epoch's loss is
    the mean, over the sentences actually trained, of each sentence's loss *before* its update.
    """
    p, d, c = _check_params(params)
    lr = _check_lr(lr)
    epochs = _check_epochs(epochs)
    frozen_set = _check_frozen(frozen)
    sentences = []
    for i, item in enumerate(dataset):
        if not isinstance(item, Sequence) or len(item) < 2:
            raise ValueError(f"dataset[{i}] must be an (x_emb, label) pair; got {type(item).__name__}")
        x = np.asarray(item[0], dtype=float_dtype(item[0]))
        if x.ndim != 2 or x.shape[1] != d - 1:
            raise ValueError(f"dataset[{i}] x_emb must be (n x e) with e = d - 1 = {d - 1}; got shape {x.shape}")
        check_finite(x, f"dataset[{i}] x_emb")
        sentences.append((x, _check_label(item[1], c, f"dataset[{i}] label")))
    return _train(sentences, p, lr, epochs, frozen_set)


# --------------------------------------------------------------------------------------------
# the flat, language-neutral encoding of a dataset (operation "classifier_train")


def pack_dataset(dataset: Iterable[tuple[np.ndarray, int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``[(x_emb, label), ...]`` -> ``(tokens, lengths, labels)``.

    ``tokens`` stacks every sentence's rows in dataset order (N_total x e), ``lengths[i]`` is the
    number of rows of sentence i (0 allowed: skipped in training) and ``labels[i]`` its 0-based
    class. Both index vectors are int64.
    """
    xs, labels = [], []
    for i, item in enumerate(dataset):
        x = np.asarray(item[0], dtype=np.float64)
        if x.ndim != 2:
            raise ValueError(f"dataset[{i}] x_emb must be a 2-D (n x e) matrix; got shape {x.shape}")
        xs.append(x)
        labels.append(_check_index(item[1], f"dataset[{i}] label"))
    if not xs:
        raise ValueError("dataset is empty")
    widths = {x.shape[1] for x in xs}
    if len(widths) != 1:
        raise ValueError(f"every sentence needs the same embedding size e; got {sorted(widths)}")
    return (
        np.concatenate(xs, axis=0),
        np.array([x.shape[0] for x in xs], dtype=np.int64),
        np.array(labels, dtype=np.int64),
    )


def unpack_dataset(tokens: np.ndarray, lengths: np.ndarray, labels: np.ndarray) -> list[tuple[np.ndarray, int]]:
    """Inverse of ``pack_dataset``; ``lengths`` and ``labels`` may be integral floats."""
    tokens = np.asarray(tokens, dtype=float_dtype(tokens))
    if tokens.ndim != 2 or tokens.shape[1] < 1:
        raise ValueError(f"tokens must be a 2-D (N_total x e) matrix with e >= 1; got shape {tokens.shape}")
    lengths_arr = np.asarray(lengths)
    labels_arr = np.asarray(labels)
    if lengths_arr.ndim != 1 or labels_arr.shape != lengths_arr.shape or lengths_arr.size == 0:
        raise ValueError(
            "lengths and labels must be non-empty vectors of the same length (one entry per sentence); "
            f"got lengths {lengths_arr.shape}, labels {labels_arr.shape}"
        )
    counts = [_check_index(v, f"lengths[{i}]") for i, v in enumerate(lengths_arr.tolist())]
    if sum(counts) != tokens.shape[0]:
        raise ValueError(
            f"sum(lengths) = {sum(counts)} must equal the number of token rows; got tokens {tokens.shape}, "
            f"lengths {lengths_arr.shape}"
        )
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(int)
    return [(tokens[offsets[i] : offsets[i + 1]], labels_arr[i].item()) for i in range(len(counts))]


def classifier_train(
    tokens: np.ndarray,
    lengths: np.ndarray,
    labels: np.ndarray,
    params: Mapping[str, np.ndarray],
    lr: float,
    epochs: int,
    frozen: Iterable[str] = (),
) -> ClassifierTraining:
    """``train_classifier`` on a dataset in the flat encoding of ``pack_dataset`` (the operation form).

    Sentence i is rows ``sum(lengths[:i]) : sum(lengths[:i+1])`` of ``tokens`` with class
    ``labels[i]`` (0-based); positions restart at 0 in every sentence.
    """
    return train_classifier(unpack_dataset(tokens, lengths, labels), params, lr, epochs, frozen)
