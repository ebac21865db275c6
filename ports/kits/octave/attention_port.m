## attention_port.m: the attention-ports protocol (version 1) for a port written in GNU Octave.
##
## One file, Octave only (no package). A port is a script that puts this file's folder on the path
## and serves its operations:
##
##   1;                                        % a script: the functions below, then the last line
##   function out = softmax (a, dims)          % a: every argument by its contract name
##     x = a.x;                                % the reference's shape, column-major, as Octave holds it
##     e = exp (x - max (x, [], 2));
##     out.y = e ./ sum (e, 2);                % named outputs (or one bare array)
##   end
##   attention_port (struct ("softmax", @softmax), struct ("description", "my port 0.1"));
##
## then `attention-ports verify --port oct=port.toml` with a manifest
## `command = ["octave-cli", "--norc", "--quiet", "--no-history", "port.m"]`.
## The protocol is docs/protocol.md. This kit declares the port column-major and 1-based: every array
## has the reference's shape (tokens are rows, weights d_in x d_out, attention weights query x key),
## stored as Octave stores it; class indices count from 1; failure messages say Octave's indices.
##
## Octave holds no 0-D or 1-D array and drops trailing dims of 1 (zeros (3, 4, 1) is 3 x 4), so:
## - an operation that takes a second argument gets `dims`: each argument's shape on the wire
##   (dims.x = [5] for a vector of 5, [] for a 0-D array, [2 3 1] where Octave says 2 x 3);
## - a result is sent with its Octave size, unless given as {array, dims}: `out.weights = {w, [h nq nk]}`
##   (nk may be 1), `out.loss = {loss, []}` (0-D), `out.y = {y, dims.x}` (x's own shape).
## Real arrays arrive as double (single for a float32 port; float16 and bfloat16 values as single,
## exactly); integer options as double; integer arrays as int64; logicals as logical; a group as a
## struct; a list as a cell. stdout and stderr are yours (captured by the suite); an error() becomes
## that case's error with its stack.
function attention_port (ops, opts)
  if (nargin < 2)
    opts = struct ();
  endif
  fds = sscanf (getenv ("ATTENTION_PORTS_WORKER_FDS"), "%d,%d");
  if (numel (fds) != 2)
    fputs (stderr, "this is an attention-ports port: run it with `attention-ports verify --port NAME=port.toml`\n");
    exit (2);
  endif
  ## Octave has no prctl: if the suite is gone, the read below ends with end of file (or the suite's
  ## reaper ends this process); a suite gone before we started is seen here.
  parent = str2double (getenv ("ATTENTION_PORTS_PARENT_PID"));
  if (! isnan (parent) && getppid () != parent)
    exit (70);
  endif
  rq = fopen (sprintf ("/dev/fd/%d", fds(1)), "r");
  rp = fopen (sprintf ("/dev/fd/%d", fds(2)), "w");
  if (rq < 0 || rp < 0)
    fputs (stderr, "attention_port.m: cannot open the protocol's pipes\n");
    exit (2);
  endif
  decl = struct ("protocol", 1, "language", "Octave", "layout", "column-major", "index_base", 1,
                 "precision", opt (opts, "precision", "float64"),
                 "masked_query", opt (opts, "masked_query", "zeros"));
  decl.operations = fieldnames (ops)';
  hello = [uint8("H"), str_(opt (opts, "description", "an Octave port")), str_(""), declvalue(decl)];
  send (rp, zeros (1, 8, "uint8"), hello);
  while (true)
    [head, n] = fread (rq, 20, "uint8=>uint8");
    if (n == 0)
      exit (0);
    elseif (n < 20)
      fputs (stderr, "attention_port.m: the request stopped in the middle\n");
      exit (3);
    elseif (! isequal (head(1:4)', uint8 ("APq1")))
      fputs (stderr, "attention_port.m: not a request frame of protocol version 1\n");
      exit (3);
    endif
    id = head(5:12)';
    len = double (typecast (head(13:20), "uint64"));
    [body, got] = fread (rq, len, "uint8=>uint8");
    if (got < len)
      fputs (stderr, "attention_port.m: the request stopped in the middle\n");
      exit (3);
    endif
    try
      [kind, p] = take (body, 1, 1);
      if (kind == "Q")
        exit (0);
      elseif (kind != "C")
        send (rp, id, [uint8("E"), str_(sprintf ("this port does not answer request kind %s", char (kind)))]);
        continue;
      endif
      [op, p] = rdstr (body, p);
      [count, p] = take (body, p, 4);
      is_echo = strcmp (op, "ap.echo");
      args = struct ();
      dims = struct ();
      flat = {};
      for i = 1:double (typecast (count, "uint32"))
        [mode, p] = take (body, p, 1);
        if (mode != "p" && mode != "k")
          error ("attention_port:malformed", "argument mode %s", char (mode));
        endif
        [name, p] = rdstr (body, p);
        if (is_echo)
          [more, p] = value (body, p, 0, name);
          flat = [flat; more];
        else
          [args.(name), p, dims.(name)] = value (body, p, 0, []);
        endif
      endfor
      if (p != numel (body) + 1)
        error ("attention_port:malformed", "%d stray bytes after the arguments", numel (body) + 1 - p);
      endif
    catch err
      if (! strcmp (err.identifier, "attention_port:malformed"))
        rethrow (err);
      endif
      send (rp, id, [uint8("E"), str_(["malformed request: " err.message])]);
      continue;
    end_try_catch
    if (is_echo)
      reply = results (flat, 0);
    elseif (! isfield (ops, op))
      reply = [uint8("M"), str_([op " is not an operation of this port"])];
    else
      fn = ops.(op);
      try
        t = tic ();
        if (nargin (fn) >= 2 || nargin (fn) < 0)
          out = fn (args, dims);
        else
          out = fn (args);
        endif
        seconds = toc (t);
        reply = results (flatten (out, "", {}), seconds);
      catch err
        reply = [uint8("E"), str_([trace_(err) op ": " err.message])];  # the error last, as it reads
      end_try_catch
    endif
    fflush (stdout);
    fflush (stderr);
    send (rp, id, reply);
  endwhile
endfunction

function v = opt (opts, name, default)
  if (isfield (opts, name))
    v = opts.(name);
  else
    v = default;
  endif
endfunction

function send (fid, id, body)
  fwrite (fid, [uint8("APr1"), id, bytes_(uint64 (numel (body))), body], "uint8");
  fflush (fid);
endfunction

## -- reading a body (a uint8 column), every length checked against what is left ------------------
function [bytes, p] = take (b, p, n)
  if (n < 0 || n > numel (b) + 1 - p)
    error ("attention_port:malformed", "truncated body: %.0f bytes wanted at offset %d", n, p - 1);
  endif
  bytes = b(p:p + n - 1);
  p += n;
endfunction

function [s, p] = rdstr (b, p)
  [n, p] = take (b, p, 4);
  [s, p] = take (b, p, double (typecast (n, "uint32")));
  s = char (s');
endfunction

## One value. With a name (ap.echo), the value flattened into results {name, array, dims, tag}; with
## [], the value as a port gets it, and its wire dims (a struct of them for a group).
function [v, p, dims] = value (b, p, depth, name)
  if (depth > 16)
    error ("attention_port:malformed", "values nested more than 16 deep");
  endif
  [tag, p] = take (b, p, 1);
  tag = char (tag);
  dims = [];
  keep = ischar (name);
  persistent scalars arrays;  # tag -> {bytes, Octave type[, the echo's array tag]}
  if (isempty (scalars))
    scalars = struct ("B", {{1, "uint8", "K"}}, "I", {{8, "int64", "Z"}}, "F", {{8, "double", "A"}},
                      "f", {{4, "single", "a"}}, "h", {{2, "uint16", "g"}}, "b", {{2, "uint16", "w"}});
    arrays = struct ("A", {{8, "double"}}, "a", {{4, "single"}}, "g", {{2, "uint16"}}, "w", {{2, "uint16"}},
                     "Z", {{8, "int64"}}, "K", {{1, "uint8"}});
  endif
  if (tag == "N")
    v = {};  # absent: an echo leaves it out
    if (! keep)
      v = [];
    endif
  elseif (isfield (scalars, tag))
    s = scalars.(tag);
    [x, p] = take (b, p, s{1});
    x = typecast (x, s{2});
    if (keep)
      v = {name, x, zeros(1, 0), s{3}};
    else
      v = as_octave (x, tag);
    endif
  elseif (tag == "S")
    [v, p] = rdstr (b, p);
    if (keep)
      v = {name, int64(uint8 (v(:))), numel(v), "Z"};
    endif
  elseif (tag == "T" || tag == "V")
    [n, p] = take (b, p, 4);
    n = double (typecast (n, "uint32"));
    if (keep)
      v = cell (0, 4);
    elseif (tag == "T")
      v = struct ();
    else
      v = cell (n, 1);
    endif
    for i = 1:n
      if (tag == "T")
        [member, p] = rdstr (b, p);
      else
        member = sprintf ("%d", i - 1);  # an echo's list items count from 0 (docs/protocol.md)
      endif
      if (keep)
        [more, p] = value (b, p, depth + 1, [name "." member]);
        v = [v; more];
      elseif (tag == "T")
        [v.(member), p, dims.(member)] = value (b, p, depth + 1, []);
      else
        [v{i}, p] = value (b, p, depth + 1, []);
      endif
    endfor
  elseif (isfield (arrays, tag))
    [ndim, p] = take (b, p, 1);
    if (ndim > 32)
      error ("attention_port:malformed", "an array of %d dimensions", ndim);
    endif
    [d, p] = take (b, p, 8 * double (ndim));
    dims = double (typecast (d, "int64"))';
    if (any (dims < 0))
      error ("attention_port:malformed", "an array of negative size");
    endif
    a = arrays.(tag);
    [x, p] = take (b, p, prod (dims) * a{1});
    x = reshape (typecast (x, a{2}), [dims, 1, 1](1:max (2, numel (dims))));
    if (tag == "K")
      x = logical (x);
    endif
    if (keep)
      v = {name, x, dims, tag};
    else
      v = as_octave (x, tag);
    endif
  else
    error ("attention_port:malformed", "unknown value tag '%s' at offset %d", tag, p - 2);
  endif
endfunction

## A decoded scalar or array as a port gets it: integer scalars as double (Octave's integer
## arithmetic rounds: num_heads must divide as a double), 16-bit floats widened to single exactly.
function x = as_octave (x, tag)
  if (tag == "I")
    x = double (x);
  elseif (tag == "B")
    x = logical (x);
  elseif (tag == "h" || tag == "g")
    e = double (bitand (bitshift (x, -10), 31));
    m = double (bitand (x, 1023));
    v = (1 + m / 1024) .* 2 .^ (e - 15);
    v(e == 0) = m(e == 0) * 2 ^ -24;
    v(e == 31) = Inf;
    v(e == 31 & m != 0) = NaN;
    sign = 1 - 2 * double (bitshift (x, -15));
    x = single (v .* sign);
  elseif (tag == "b" || tag == "w")
    x = reshape (typecast (bitshift (uint32 (x(:)), 16), "single"), size (x));
  endif
endfunction

## -- writing ------------------------------------------------------------------------------------
function b = bytes_ (x)  # little-endian bytes, as a row (typecast keeps a column a column)
  b = reshape (typecast (x, "uint8"), 1, []);
endfunction

function b = str_ (s)
  b = uint8 (s(:)');
  b = [bytes_(uint32 (numel (b))), b];
endfunction

function b = declvalue (v)  # the declaration: struct, cell of strings, string, integer
  if (isstruct (v))
    names = fieldnames (v);
    b = [uint8("T"), bytes_(uint32 (numel (names)))];
    for i = 1:numel (names)
      b = [b, str_(names{i}), declvalue(v.(names{i}))];
    endfor
  elseif (iscell (v))
    b = [uint8("V"), bytes_(uint32 (numel (v)))];
    for i = 1:numel (v)
      b = [b, declvalue(v{i})];
    endfor
  elseif (ischar (v))
    b = [uint8("S"), str_(v)];
  else
    b = [uint8("I"), bytes_(int64 (v))];
  endif
endfunction

## A port's results as {name, array, dims, tag} rows: a struct's fields named outer.inner, an
## {array, dims} cell sent with those dims, a bare array with its Octave size.
function flat = flatten (v, name, flat)
  if (isstruct (v) && isscalar (v))
    fields = fieldnames (v);
    for i = 1:numel (fields)
      inner = fields{i};
      if (! isempty (name))
        inner = [name "." inner];
      endif
      flat = flatten (v.(fields{i}), inner, flat);
    endfor
  elseif (iscell (v))
    if (numel (v) != 2 || ! (isnumeric (v{2}) && isvector (v{2}) || isempty (v{2})))
      error ("result %s: a cell must be {array, dims}", name);
    endif
    flat(end + 1, :) = {name, v{1}, double(v{2}(:)'), ""};
  else
    flat(end + 1, :) = {name, v, size(v), ""};
  endif
endfunction

function body = results (flat, seconds)
  parts = {uint8("T"), bytes_(max (0, double (seconds))), str_(""), ...
           bytes_(uint32 (rows (flat)))};
  for i = 1:rows (flat)
    [name, x, dims, tag] = flat{i, :};
    if (isempty (tag))
      tags = struct ("double", "A", "single", "a", "logical", "K");
      if (isfield (tags, class (x)))
        tag = tags.(class (x));
      elseif (isinteger (x))
        tag = "Z";
      else
        error ("result %s: cannot send a %s (return double, single, integer or logical arrays)", name, class (x));
      endif
    endif
    if (! isreal (x))
      error ("result %s: a complex array", name);
    elseif (numel (x) != prod (dims))
      error ("result %s: %d elements, but the dims [%s] hold %d", name, numel (x), num2str (dims), prod (dims));
    endif
    types = struct ("A", "double", "a", "single", "K", "uint8", "Z", "int64", "g", "uint16", "w", "uint16");
    data = bytes_(cast (x(:), types.(tag)));
    parts(end + 1:end + 2) = {str_(name), [uint8(tag), uint8(numel (dims)), bytes_(int64 (dims)), data]};
  endfor
  body = [parts{:}];
endfunction

function text = trace_ (err)  # the stack, innermost first, without this kit's own frames
  text = "";
  for s = err.stack'
    if (isempty (strfind (s.file, "attention_port.m")))
      text = [text sprintf("  at %s (%s:%d)\n", s.name, s.file, s.line)];
    endif
  endfor
endfunction
