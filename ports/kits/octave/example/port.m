## A walkthrough port with the Octave kit: softmax, scaled_dot_product_attention and
## multi_head_attention at float64, column-major and 1-based (the reference's shapes, as Octave
## holds them).
##
##   attention-ports verify --port oct=ports/kits/octave/example/port.toml
1;  # a script file: the functions below, then the call that serves them

## Along axis `ax`; an all -Inf slice comes back NaN (0/0), as the reference's does.
function y = softmax_along (x, ax)
  e = exp (x - max (x, [], ax));
  y = e ./ sum (e, ax);
endfunction

## dims.x is x's shape on the wire: its last axis is the softmax's, and the result keeps that shape
## (Octave cannot hold a 1-D x or a trailing dim of 1).
function out = softmax (a, dims)
  if (any (isnan (a.x(:)) | a.x(:) == Inf))
    error ("softmax: x contains NaN or +Inf");
  endif
  out.y = {softmax_along(a.x, max (1, numel (dims.x))), dims.x};
endfunction

## One head: q (nq x d), k (nk x d), v (nk x dv), an additive mask (nq x nk) or []. A query whose
## every score is -Inf gets zero weights and output (masked_query "zeros").
function [o, w] = attend (q, k, v, mask, scale)
  s = (q * k') * scale;
  if (! isempty (mask))
    s += mask;
  endif
  dead = all (s == -Inf, 2);
  w = softmax_along (s, 2);
  w(dead, :) = 0;
  o = w * v;
endfunction

function v = field_or (a, name, default)
  if (isfield (a, name))
    v = a.(name);
  else
    v = default;
  endif
endfunction

function out = scaled_dot_product_attention (a)
  if (columns (a.k) != columns (a.q) || rows (a.v) != rows (a.k))
    error ("q %s, k %s, v %s do not fit", mat2str (size (a.q)), mat2str (size (a.k)), mat2str (size (a.v)));
  endif
  scale = field_or (a, "scale", 1 / sqrt (columns (a.q)));
  [out.output, out.weights] = attend (a.q, a.k, a.v, field_or (a, "mask", []), scale);
endfunction

function y = project (x, w, b)  # x (n x d_in) * w (d_in x d_out) + b (a vector of d_out)
  y = x * w;
  if (! isempty (b))
    y += b(:)';
  endif
endfunction

function out = multi_head_attention (a)
  [nq, dm] = size (a.query);
  nk = rows (a.key);
  h = a.num_heads;
  dh = dm / h;
  if (dh != fix (dh))
    error ("num_heads=%d must divide d_model=%d", h, dm);
  endif
  q = project (a.query, a.w_q, field_or (a, "b_q", []));
  k = project (a.key, a.w_k, field_or (a, "b_k", []));
  v = project (a.value, a.w_v, field_or (a, "b_v", []));
  mask = field_or (a, "mask", []);
  concat = zeros (nq, dm);
  w = zeros (h, nq, nk);
  for i = 1:h
    cols = (i - 1) * dh + (1:dh);
    [concat(:, cols), wi] = attend (q(:, cols), k(:, cols), v(:, cols), mask, 1 / sqrt (dh));
    w(i, :, :) = reshape (wi, [1, nq, nk]);
  endfor
  out.output = project (concat, a.w_o, field_or (a, "b_o", []));
  out.weights = {w, [h, nq, nk]};  # heads x query x key, even where nk is 1
endfunction

addpath (fileparts (fileparts (mfilename ("fullpath"))));  # the kit: attention_port.m
attention_port (struct ("softmax", @softmax, "scaled_dot_product_attention", @scaled_dot_product_attention,
                        "multi_head_attention", @multi_head_attention),
                struct ("description", sprintf ("Octave kit walkthrough port 1.0 (GNU Octave %s)", version ())));
