# The Julia side of the port verifier.
#
#   julia worker.jl PORT           serve calls (started by attention_ports/supervisor.py)
#   include("worker.jl")           only define JuliaPortWorker (ports/julia_juliacall.py)
#
# A port file is included into a fresh anonymous module, so a file that defines only some of the
# operations is fine: the others are reported missing. PORT may also be a directory (ours is
# ports/julia/src): every *.jl file in it is included, in name order, into that one module.
# Julia 1.5 to 1.11, standard library only.
#
# The wire protocol is attention_ports/protocol.py's (its docstring is the specification): frames
# `magic, u64 id, u64 length, body` on two private pipes whose descriptors the supervisor passes in
# $ATTENTION_PORTS_WORKER_FDS ("REQUEST,REPLY"); stdout and stderr are the port's own, captured
# by the supervisor, so nothing a port prints can reach a reply. Bodies, little-endian:
#   value   := 'N' | 'F' f64 | 'I' i64 | 'B' u8 | 'S' str
#            | 'A' u8 ndims, ndims x i64 dims, prod(dims) x f64 in column-major order
#            | 'Z' the same with i64 elements                  (integer arrays: lengths, labels)
#            | 'K' the same with u8 elements                   (logical arrays)
#            | 'f' f32 | 'a' the same with f32 elements         (a float32 port's arguments)
#            | 'h' f16 | 'g' the same with f16 elements         (a float16 port's arguments)
#            | 'T' u32 n, n x (str name, value)                (a group, e.g. params -> NamedTuple)
#            | 'V' u32 n, n x value                            (a list -> Vector; empty: String[])
#            | 'X' str type                                    (no wire form; declarations only)
#   str     := u32 nbytes, UTF-8 bytes
#   request := 'C' str op, u32 n, n x (u8 'p' | 'k', str name, value)   | 'Q' (quit)
#            | 'P' u32 1, str path     load another port in place of this one: answered like a start
#                                      (redefining what differs where that is the same: `patch!`)
#   reply   := 'R' str notes, u32 n, n x (str name, 'A' array)   results, flattened ("" = a bare array)
#            | 'T' f64 seconds, then as 'R'                     the same, with the port's own time
#            | 'M' str message                                  the port does not define op
#            | 'E' str message                                  the call threw: message and backtrace
#   hello   := 'H' str description, str notes, value declaration | 'L' str message   (id 0)
module JuliaPortWorker

import Random

const TAG_NOTHING, TAG_F64, TAG_I64, TAG_BOOL, TAG_STR = UInt8('N'), UInt8('F'), UInt8('I'), UInt8('B'), UInt8('S')
const TAG_ARRAY, TAG_INT_ARRAY, TAG_GROUP, TAG_LIST = UInt8('A'), UInt8('Z'), UInt8('T'), UInt8('V')
const TAG_BOOL_ARRAY, TAG_UNSUPPORTED = UInt8('K'), UInt8('X')
# A float32 port's values (attention_ports/precision.py): Float32 arrays and scalars, so that a
# port generic over T<:AbstractFloat runs in Float32 from its arguments alone.
const TAG_F32, TAG_F32_ARRAY = UInt8('f'), UInt8('a')
const TAG_F16, TAG_F16_ARRAY = UInt8('h'), UInt8('g')  # a float16 port's, the same way
const REQUEST_MAGIC, REPLY_MAGIC = Vector{UInt8}("APq1"), Vector{UInt8}("APr1")
const HEADER_BYTES = 20

# ---------------------------------------------------------------------------------------------
# Loading a port and calling it: shared by the worker and the juliacall transport.

# Ports already loaded and compiled into a custom system image (scripts/julia_sysimage.jl):
# path => (each source file's name and bytes, the module). `load_port` returns one only while every
# file still holds exactly those bytes, so an image changes what must be compiled, never what runs.
const PRELOADED = Dict{String,Tuple{Vector{Pair{String,Vector{UInt8}}},Module}}()

"""The source files of a port: the file itself, or every *.jl file of a directory in name order."""
function port_files(path::AbstractString)
    is_source(f) = endswith(f, ".jl") && !startswith(basename(f), ".")   # not an editor's .#lock.jl
    files = isdir(path) ? sort!(filter(is_source, readdir(path; join = true))) : [String(path)]
    isempty(files) && throw(ArgumentError("the port directory $path holds no *.jl file"))
    return files
end

port_sources(files) = [f => read(f) for f in files]

"""Include `path` (a file, or every *.jl file of a directory in name order) into a fresh anonymous
module and return the module (throws on load errors); or the image's module of the same sources."""
function load_port(path::AbstractString)
    files = port_files(path)
    hit = get(PRELOADED, String(path), nothing)
    if hit !== nothing && hit[1] == port_sources(files)
        BUILT_FROM[hit[2]] = (hit[1], nothing)
        return hit[2]
    end
    mod = Module(:Port)
    for file in files
        Base.include(mod, file)
    end
    BUILT_FROM[mod] = (port_sources(files), nothing)
    return mod
end

# ---------------------------------------------------------------------------------------------
# Loading in place by redefinition ('P': the mutation kit's mutants, each one edit of our port).
# Including ~1000 lines into a fresh module makes Julia lower them and infer and compile anew every
# method a case calls (~0.7 s of CPU a mutant, most of the kit's time). Where the next port differs
# from the served module's sources only inside method bodies, redefining those methods in the
# served module gives what a fresh module would: Julia invalidates every compiled caller of a
# redefined method, and nothing else of the module differs. Anything else is loaded afresh.

# The sources each module was built from (or last patched to), what `patch!` compares with, and
# their top-level expressions once parsed (`toplevel_exprs`: ~0.04 s for our port, so a version is
# parsed once, as the next port, not again as the last one).
const BUILT_FROM = IdDict{Module,Tuple{Vector{Pair{String,Vector{UInt8}}},Any}}()

"""Every top-level expression of `sources` (files in order): the line it starts on, the
expression, and the expression without line numbers (`_bare`, what two versions compare by)."""
function toplevel_exprs(sources)
    items = Tuple{LineNumberNode,Any,Any}[]
    for (file, bytes) in sources
        parsed = Base.parse_input_line(String(copy(bytes)); filename = String(file))
        line = LineNumberNode(0, Symbol(file))
        for ex in (parsed isa Expr && parsed.head === :toplevel ? parsed.args : Any[parsed])
            ex isa LineNumberNode ? (line = ex) : push!(items, (line, ex, _bare(ex)))
        end
    end
    return items
end

# An expression without its line numbers (a macro call keeps the place of its own, as `nothing`).
_bare(x) = x
_bare(ex::Expr) =
    Expr(ex.head, (a isa LineNumberNode ? nothing : _bare(a) for a in ex.args
                   if !(a isa LineNumberNode) || ex.head === :macrocall)...)
_is_doc(m) = m === Symbol("@doc") || m == GlobalRef(Core, Symbol("@doc"))
_is_documented(ex) = ex isa Expr && ex.head === :macrocall && length(ex.args) == 4 && _is_doc(ex.args[1])

"""The signature of the method `ex` defines (`function f(...)`, `f(...) = ...`, either under a
docstring), with the name of its function (a plain name: not another module's function); or nothing."""
function method_signature(ex)
    _is_documented(ex) && (ex = ex.args[4])
    (ex isa Expr && ex.head in (:function, :(=)) && length(ex.args) == 2) || return nothing
    call = ex.args[1]
    while call isa Expr && call.head === :where
        call = call.args[1]
    end
    (call isa Expr && call.head === :call && call.args[1] isa Symbol) || return nothing
    return (call.args[1], _bare(ex.args[1]))
end

# What a redefinition cannot give as a fresh include would: a body that reaches the file's place
# or the module's globals, or defines more than a method.
const _NOT_PATCHED = Set([Symbol("@__DIR__"), Symbol("@__FILE__"), Symbol("@__MODULE__"),
                          :global, :const, :module, :macro, :struct])
# Code loaded from elsewhere, anywhere in a port: the same text may stand for other code.
const _LOADS_CODE = Set([:include, :include_string, :eval, Symbol("@eval"), :evalfile])

# A global a method could have changed since the load (one not constant, or a Ref, an array, a
# Dict, a closure: what `_frozen` is not): a fresh module would start from its initial value again.
# The docstrings' table is Julia's.
_frozen(v) = v isa Union{Module,Type,Symbol,AbstractString,Number,Char,Nothing} ||
             (v isa Function && fieldcount(typeof(v)) == 0) ||   # a function, not a closure
             (v isa Union{Tuple,NamedTuple} && all(_frozen, v))
_stateless(mod::Module) = all(names(mod; all = true)) do n
    n === Base.Docs.META || !isdefined(mod, n) || (isconst(mod, n) && _frozen(getfield(mod, n)))
end

function _mentions(ex, names)
    ex isa Symbol && return ex in names
    ex isa QuoteNode && return _mentions(ex.value, names)   # Base.include: (. Base (quote include))
    ex isa Expr || return false
    ex.head in names && return true
    return any(a -> _mentions(a, names), ex.args)
end

"""Make `mod` (built from sources recorded in BUILT_FROM) serve the port at `path` by redefining
the methods whose bodies differ, where that is what including `path` into a fresh module gives:
the two ports' top-level expressions pair one to one, every pair that differs defines one method
of the same name and signature (no new binding, no constant, no type), its new body names nothing
of `_NOT_PATCHED`, no other top-level expression (run once, at load time) names a redefined
function, no expression of the port loads code from elsewhere (`_LOADS_CODE`: an included file's
change would not be seen), and `mod` holds no global a method could have changed (`_stateless`). Returns false,
`mod` untouched, where not; a redefinition that throws leaves `mod` unusable (no longer in
BUILT_FROM or PRELOADED) and the caller loads the port afresh."""
function patch!(mod::Module, path::AbstractString)
    built = get(BUILT_FROM, mod, nothing)
    (built === nothing || !_stateless(mod)) && return false
    sources = port_sources(port_files(path))
    old = built[2] === nothing ? toplevel_exprs(built[1]) : built[2]
    new = toplevel_exprs(sources)
    length(old) == length(new) || return false
    changed, names = Tuple{LineNumberNode,Any}[], Set{Symbol}()
    for ((_, x, bx), (line, y, by)) in zip(old, new)
        bx == by && continue
        sx, sy = method_signature(x), method_signature(y)
        (sx !== nothing && sx == sy && !_mentions(y, _NOT_PATCHED)) || return false
        # the method alone where its docstring is unchanged: no "Replacing docs" warning
        same_doc = _is_documented(x) && _is_documented(y) && _bare(x.args[3]) == _bare(y.args[3])
        push!(changed, (line, same_doc ? y.args[4] : y))
        push!(names, sy[1])
    end
    any(((_, y),) -> method_signature(y) === nothing && _mentions(y, names), new) && return false
    any(((_, y),) -> _mentions(y, _LOADS_CODE), new) && return false
    delete!(BUILT_FROM, mod)
    filter!(((_, (_, m)),) -> m !== mod, PRELOADED)   # the image's module is no longer its sources'
    for (line, y) in changed
        Core.eval(mod, Expr(:toplevel, line, y))
    end
    BUILT_FROM[mod] = (sources, new)
    return true
end

# The binding is the port's own (defined at its top level or in a module it defines), not one
# that merely resolves through `using Base`.
function _owned_by(mod::Module, owner::Module)
    while true
        owner === mod && return true
        parent = parentmodule(owner)
        parent === owner && return false
        owner = parent
    end
end

"""The port's function called `name`, or `nothing`. Also looks inside a module the file defines."""
function find_op(mod::Module, name::AbstractString)
    sym = Symbol(name)
    if isdefined(mod, sym) && _owned_by(mod, Base.binding_module(mod, sym))
        return getfield(mod, sym)
    end
    for n in names(mod; all = true)
        sub = isdefined(mod, n) ? getfield(mod, n) : nothing
        if sub isa Module && sub !== mod && parentmodule(sub) === mod && isdefined(sub, sym) &&
           _owned_by(mod, Base.binding_module(sub, sym))
            return getfield(sub, sym)
        end
    end
    return nothing
end

# Results are flattened to named Float64 arrays: NamedTuples and Dicts by key (nested ones as
# "outer.inner"), a bare array as "".
function flatten!(out::Vector{Pair{String,Array{Float64}}}, prefix::String, x)
    key(k) = isempty(prefix) ? string(k) : string(prefix, ".", k)
    if x isa NamedTuple
        for k in keys(x)
            flatten!(out, key(k), x[k])
        end
    elseif x isa AbstractDict
        for (k, v) in x
            flatten!(out, key(k), v)
        end
    elseif x isa Tuple
        for (i, v) in enumerate(x)
            flatten!(out, key(string("#", i)), v)
        end
    elseif x isa AbstractArray{<:Real}
        push!(out, prefix => convert(Array{Float64}, x))   # no copy when it already is one
    elseif x isa Real
        push!(out, prefix => fill(Float64(x)))
    else
        throw(ArgumentError("cannot return a value of type $(typeof(x))" *
                            (isempty(prefix) ? "" : " as `$prefix`") *
                            "; return arrays of real numbers in a NamedTuple or a Dict"))
    end
    return out
end

const WORKER_FILE = abspath(@__FILE__)

# A frame of this worker, or of Base.invokelatest's keyword wrapper (essentials.jl's `#inner#`
# closure), through which every port call goes: not the port's.
function harness_frame(sf, stop)
    file = String(sf.file)
    func = string(sf.func)
    return (isabspath(file) && abspath(file) == WORKER_FILE) || any(s -> occursin(s, func), stop) ||
           (basename(file) == "essentials.jl" && occursin("inner", func))
end

# The exception and its backtrace down to the port's frames: everything from the first harness
# frame on (this worker's, invokelatest's, or one whose function name contains one of `stop`) is
# noise to a port's author, and so is a frame of this file before it (flatten! judging a result).
function error_message(e, bt; stop = ("invokelatest", "call_op"))
    frames = stacktrace(bt)
    cut = findfirst(sf -> harness_frame(sf, stop), frames)
    cut === nothing || (frames = frames[1:(cut - 1)])
    io = IOBuffer()
    showerror(io, e)
    if !isempty(frames)
        print(io, "\nStacktrace:")
        for (i, sf) in enumerate(frames)
            print(io, "\n [", i, "] ", sf)
        end
    end
    return String(take!(io))
end

"""
    call_op(mod, path, op, args, kwargs) -> (status, message, results, seconds)

Call the port's `op` with positional `args` and keyword `kwargs` (pairs Symbol => value).
`status` is :ok (with flattened `results`), :missing or :error (with `message`); `seconds` is the
wall time of the port's function alone (what `attention-ports bench` calls compute).
"""
function call_op(mod::Module, path::AbstractString, op::AbstractString, args::Vector{Any},
                 kwargs::Vector{Pair{Symbol,Any}})
    results = Pair{String,Array{Float64}}[]
    f = find_op(mod, op)
    f === nothing && return (:missing, "$op is not defined in $path", results, 0.0)
    start = time_ns()
    try
        # without keywords, no NamedTuple to build at run time (a few microseconds a small call)
        value = isempty(kwargs) ? Base.invokelatest(f, args...) : Base.invokelatest(f, args...; kwargs...)
        seconds = (time_ns() - start) / 1e9
        flatten!(results, "", value)
        return (:ok, "", results, seconds)
    catch e
        e isa InterruptException && rethrow()
        return (:error, error_message(e, catch_backtrace()), results, (time_ns() - start) / 1e9)
    end
end

# ---------------------------------------------------------------------------------------------
# The port's declaration (ports/CONTRACT.md): found here, sent as it is, checked by Python
# (attention_ports/declaration.py), so both languages get the same checks and messages.

declaration(mod::Module) = find_op(mod, "attention_ports")

# Any Julia value, as far as the wire can carry it; the rest as 'X' with its type's name.
function write_any(io::IO, x, depth::Int = 0)
    if x === nothing
        write(io, TAG_NOTHING)
    elseif x isa AbstractString || x isa Symbol
        write(io, TAG_STR)
        _writestr(io, string(x))
    elseif x isa Bool
        write(io, TAG_BOOL, UInt8(x))
    elseif x isa Integer && typemin(Int64) <= x <= typemax(Int64)
        write(io, TAG_I64, htol(Int64(x)))
    elseif x isa AbstractFloat
        write(io, TAG_F64, htol(Float64(x)))
    elseif depth < 8 && (x isa NamedTuple || x isa AbstractDict)
        write(io, TAG_GROUP, htol(UInt32(length(x))))
        for (k, v) in pairs(x)
            _writestr(io, string(k))
            write_any(io, v, depth + 1)
        end
    elseif depth < 8 && (x isa AbstractVector || x isa Tuple)
        write(io, TAG_LIST, htol(UInt32(length(x))))
        for v in x
            write_any(io, v, depth + 1)
        end
    else
        write(io, TAG_UNSUPPORTED)
        _writestr(io, string(typeof(x)))
    end
    return io
end

# ---------------------------------------------------------------------------------------------
# The wire protocol.

# A body is read whole from the pipe first (its frame says how long it is), then decoded from
# memory; every length inside it is checked against what is left before anything is allocated, so
# a body that lies about a length is a malformed request, answered 'E' (docs/protocol.md "Errors"),
# not a wait for bytes that never come or an allocation of the lie.
function need(io::IO, n::Integer)
    left = bytesavailable(io)
    0 <= n <= left || throw(MalformedRequest("truncated body: $n bytes wanted at offset $(position(io)), $left left"))
    return Int(n)
end

struct MalformedRequest <: Exception
    msg::String
end

_readstr(io::IO) = String(read!(io, Vector{UInt8}(undef, need(io, ltoh(read(io, UInt32))))))

function _writestr(io::IO, s::AbstractString)
    write(io, htol(UInt32(sizeof(s))))
    write(io, s)
end

function read_value(io::IO)
    tag = read(io, UInt8)
    tag == TAG_NOTHING && return nothing
    tag == TAG_F64 && return ltoh(read(io, Float64))
    tag == TAG_F32 && return ltoh(read(io, Float32))
    tag == TAG_F16 && return ltoh(read(io, Float16))
    tag == TAG_I64 && return ltoh(read(io, Int64))
    tag == TAG_BOOL && return read(io, UInt8) != 0x00
    tag == TAG_STR && return _readstr(io)
    if tag in (TAG_ARRAY, TAG_INT_ARRAY, TAG_BOOL_ARRAY, TAG_F32_ARRAY, TAG_F16_ARRAY)
        nd = Int(read(io, UInt8))
        need(io, 8 * nd)
        dims = Int[ltoh(read(io, Int64)) for _ in 1:nd]
        T = tag == TAG_ARRAY ? Float64 : tag == TAG_INT_ARRAY ? Int64 : tag == TAG_F32_ARRAY ? Float32 :
            tag == TAG_F16_ARRAY ? Float16 : UInt8
        all(d -> 0 <= d <= bytesavailable(io), dims) || need(io, -1)
        need(io, sizeof(T) * prod(big.(dims)))   # big: 32 dims cannot overflow it
        a = Array{T}(undef, dims...)
        read!(io, a)                     # column-major: the C-order bytes of the transposed array
        return tag == TAG_BOOL_ARRAY ? a .!= 0x00 : a
    end
    if tag == TAG_GROUP
        names, values = Symbol[], Any[]
        for _ in 1:ltoh(read(io, UInt32))
            push!(names, Symbol(_readstr(io)))
            push!(values, read_value(io))
        end
        return NamedTuple{Tuple(names)}(Tuple(values))
    end
    if tag == TAG_LIST
        items = Any[read_value(io) for _ in 1:ltoh(read(io, UInt32))]
        return isempty(items) ? String[] : [x for x in items]   # narrowed: Vector{String}, ...
    end
    error("protocol error: unknown value tag $(repr(tag))")
end

function write_array(io::IO, a::Array{Float64})
    write(io, TAG_ARRAY, UInt8(ndims(a)))
    for n in size(a)
        write(io, htol(Int64(n)))
    end
    write(io, a)
end

# After the 'C': the operation, then each argument as (mode, name, value); mode 'p' is
# positional, 'k' a keyword.
function read_request(io::IO)
    op = _readstr(io)
    args = Any[]
    kwargs = Pair{Symbol,Any}[]
    for _ in 1:ltoh(read(io, UInt32))
        mode = read(io, UInt8)
        name = _readstr(io)
        value = read_value(io)
        if mode == UInt8('p')
            push!(args, value)
        elseif mode == UInt8('k')
            push!(kwargs, Symbol(name) => value)
        else
            error("protocol error: argument mode $(repr(mode))")
        end
    end
    return op, args, kwargs
end

function write_reply(io::IO, status::Symbol, msg::String, results)
    if status === :ok
        write(io, UInt8('R'))
        _writestr(io, "")                 # notes: R's warnings; Julia has none to send
        write(io, htol(UInt32(length(results))))
        for (name, a) in results
            _writestr(io, name)
            write_array(io, a)
        end
    else
        write(io, status === :missing ? UInt8('M') : UInt8('E'))
        _writestr(io, msg)
    end
    return io
end

# A frame's body is assembled in `buf` after a gap of HEADER_BYTES (see `start_message`) that
# now receives the header: magic, the request's id, the body's length. One frame, one write.
function send(out::IO, id::UInt64, buf::IOBuffer)
    bytes = take!(buf)
    write_header!(bytes, id, UInt64(length(bytes) - HEADER_BYTES))
    write(out, bytes)
    flush(out)
end

function write_header!(bytes::Vector{UInt8}, id::UInt64, n::UInt64)
    bytes[1:4] = REPLY_MAGIC
    for i in 1:8                              # little-endian by construction
        bytes[4 + i] = (id >> (8 * (i - 1))) % UInt8
        bytes[12 + i] = (n >> (8 * (i - 1))) % UInt8
    end
    return bytes
end

# Results go out without being copied into a buffer first: the frame header and each array's
# description from a small buffer, the arrays' own memory straight to the pipe (IOStream buffers
# small writes, so a small reply is still one system call).
function send_results(out::IO, id::UInt64, results, seconds::Float64)
    n = 1 + 8 + 4 + 4                              # 'T', seconds, empty notes, count
    for (name, a) in results
        n += 4 + sizeof(name) + 2 + 8 * ndims(a) + 8 * length(a)
    end
    head = IOBuffer()
    write(head, zeros(UInt8, HEADER_BYTES), UInt8('T'), htol(seconds))
    _writestr(head, "")                            # notes: R's warnings; Julia has none to send
    write(head, htol(UInt32(length(results))))
    first = true
    for (name, a) in results
        _writestr(head, name)
        write(head, TAG_ARRAY, UInt8(ndims(a)))
        for d in size(a)
            write(head, htol(Int64(d)))
        end
        bytes = take!(head)
        first && write_header!(bytes, id, UInt64(n))
        first = false
        write(out, bytes)
        write(out, a)
    end
    first && write(out, write_header!(take!(head), id, UInt64(n)))
    flush(out)
end

start_message(buf::IOBuffer) = (write(buf, zeros(UInt8, HEADER_BYTES)); buf)

# The request header: its id and body length; nothing if the supervisor closed the pipe.
function read_header(input::IO)
    eof(input) && return nothing
    header = Vector{UInt8}(undef, HEADER_BYTES)
    unsafe_read(input, pointer(header), HEADER_BYTES)
    header[1:4] == REQUEST_MAGIC || error("protocol error: not a request frame")
    id, n = zero(UInt64), zero(UInt64)
    for i in 8:-1:1
        id = (id << 8) | header[4 + i]
        n = (n << 8) | header[12 + i]
    end
    return id, n
end

# Die with the supervisor (its docstring says why both steps): be SIGKILLed when the parent
# dies, and exit now if it already died before the prctl took effect.
function die_with_parent()
    Sys.islinux() || return
    ccall(:prctl, Cint, (Cint, Culong, Culong, Culong, Culong), 1, 9, 0, 0, 0)   # PR_SET_PDEATHSIG, SIGKILL
    expected = get(ENV, "ATTENTION_PORTS_PARENT_PID", "")
    if !isempty(expected) && ccall(:getppid, Cint, ()) != parse(Cint, expected)
        ccall(:_exit, Cvoid, (Cint,), 70)
    end
end

# The two protocol descriptors, closed on exec so that a process the port runs cannot inherit them.
function open_channel()
    fds = parse.(Cint, split(ENV["ATTENTION_PORTS_WORKER_FDS"], ","))
    for fd in fds
        ccall(:fcntl, Cint, (Cint, Cint, Cint), fd, 2, 1)     # F_SETFD, FD_CLOEXEC
    end
    return fdio(Int(fds[1])), fdio(Int(fds[2]))
end

function flush_output()
    for io in (stdout, stderr)
        try
            flush(io)
        catch
        end
    end
end

"""The greeting for `path`'s port in `buf`: the module ('H'), or `nothing` and why it did not load ('L')."""
function greet!(buf::IOBuffer, path::AbstractString, loader = load_port)
    mod = try
        loader(path)
    catch e
        flush_output()
        write(start_message(buf), UInt8('L'))
        _writestr(buf, "cannot load $path:\n" * error_message(e, catch_backtrace(); stop = ("include", "load_port")))
        return nothing
    end
    flush_output()
    write(start_message(buf), UInt8('H'))
    _writestr(buf, "Julia $(VERSION), port $path")
    _writestr(buf, "")
    write_any(buf, declaration(mod))
    return mod
end

# What a port could change beyond its own module that a load in place ('P') must find as it was:
# the working directory, the environment variables, the global random number generator, BigFloat's
# precision and rounding. A port that adds methods to another module's functions is not seen here.
session_state() = (pwd(), sort!(collect(ENV)), copy(Random.default_rng()), precision(BigFloat), rounding(BigFloat))

"""Serve requests until the request pipe closes or a 'Q' arrives; a 'P' loads another port in place
of this one (the mutation kit's: attention_ports/tools/mutation.py, KeptWorker) while the session is
as it was before the first port, and otherwise refuses ('E'), then ends: the supervisor starts afresh."""
function serve(path::AbstractString)
    die_with_parent()
    input, output = open_channel()
    buf = IOBuffer()
    pristine = session_state()
    mod = greet!(buf, path)
    mod === nothing || warm_up()
    send(output, zero(UInt64), buf)
    mod === nothing && return
    while true
        header = read_header(input)
        header === nothing && return
        id, n = header
        n < UInt64(1) << 40 || error("protocol error: a request body of $n bytes")
        body = Vector{UInt8}(undef, n)
        # not read(input, n): on a pipe, Julia 1.5's read waits for eof() after the last byte, that
        # is, for the next request; unsafe_read stops at n (EOFError if the pipe closes first)
        GC.@preserve body unsafe_read(input, pointer(body), n)
        io = IOBuffer(body)
        kind = eof(io) ? 0x00 : read(io, UInt8)
        kind == UInt8('Q') && return
        if kind == UInt8('P')
            files = try
                String[_readstr(io) for _ in 1:ltoh(read(io, UInt32))]
            catch e
                e isa Union{MalformedRequest,EOFError} || rethrow()
                String[]
            end
            loaded = nothing
            if length(files) != 1
                write(start_message(buf), UInt8('E'))
                _writestr(buf, "malformed request: a Julia port is one file or folder, got $(length(files))")
            elseif session_state() != pristine
                write(start_message(buf), UInt8('E'))
                _writestr(buf, "julia: the previous port changed the session: a fresh worker")
            else
                # redefined in the served module where that is what a fresh one would be (patch!)
                patched = try
                    patch!(mod, files[1])
                catch
                    false
                end
                loaded = greet!(buf, files[1], patched ? (_ -> mod) : load_port)
            end
            send(output, id, buf)
            loaded === nothing && return   # refused, or it did not load: the supervisor discards this worker
            loaded === mod || delete!(BUILT_FROM, mod)   # the last port's module, no longer served
            mod, path = loaded, files[1]
            continue
        end
        request = try
            kind == UInt8('C') || throw(MalformedRequest("unknown request kind $(repr(kind))"))
            read_request(io)
        catch e
            e isa Union{MalformedRequest,EOFError,ArgumentError,InexactError} || rethrow()
            write(start_message(buf), UInt8('E'))
            _writestr(buf, "malformed request: " * (e isa MalformedRequest ? e.msg : sprint(showerror, e)))
            send(output, id, buf)
            continue
        end
        op, args, kwargs = request
        status, msg, results, seconds = call_op(mod, path, op, args, kwargs)
        flush_output()                      # what the port printed goes out before the reply
        if status === :ok
            send_results(output, id, results, seconds)
        else
            write_reply(start_message(buf), status, msg, results)
            send(output, id, buf)
        end
    end
end

# Compile the hot path of the protocol before the first call (no port code runs here). Error
# reporting and Dict results are left to compile when first needed: they would double this.
function warm_up()
    io = IOBuffer()
    _writestr(io, "op")
    write(io, htol(UInt32(5)))
    write(io, UInt8('p'))
    _writestr(io, "x")
    write_array(io, zeros(2, 3))
    write(io, UInt8('p'))
    _writestr(io, "n")
    write(io, TAG_I64, htol(Int64(1)))
    for (name, tag, v) in (("a", TAG_F64, 1.0), ("b", TAG_BOOL, 0x01))
        write(io, UInt8('k'))
        _writestr(io, name)
        write(io, tag, v)
    end
    write(io, UInt8('k'))
    _writestr(io, "c")
    write(io, TAG_NOTHING)
    op, args, kwargs = read_request(seekstart(io))
    results = flatten!(Pair{String,Array{Float64}}[], "", (x = args[1], y = (z = 1.0,)))
    write_reply(start_message(IOBuffer()), :ok, "", results)
    send_results(IOBuffer(), zero(UInt64), results, 0.0)
    return nothing
end

# The juliacall transport: the same request and reply bodies, in memory instead of over a pipe.
declaration_bytes(mod::Module) = take!(write_any(IOBuffer(), declaration(mod)))

function call_bytes(mod::Module, path::AbstractString, request::AbstractVector{UInt8})
    io = IOBuffer(Vector{UInt8}(request))
    read(io, UInt8) == UInt8('C') || error("protocol error: not a call request")
    op, args, kwargs = read_request(io)
    status, msg, results, _ = call_op(mod, path, op, args, kwargs)
    return take!(write_reply(IOBuffer(), status, msg, results))
end

end # module JuliaPortWorker

if abspath(PROGRAM_FILE) == abspath(@__FILE__)
    JuliaPortWorker.serve(ARGS[1])
end
