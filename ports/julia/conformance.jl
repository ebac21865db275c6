# attention-ports conformance, in Julia alone: judge a Julia port against the golden fixtures with
# the standard library (Test, Printf, SHA), no Python. Julia 1.5 to 1.11.
#
#   julia conformance.jl [options] PORT.jl | PORTDIR
#
#   --fixtures DIR   the fixtures folder (default: the one shipped with this file, ../../fixtures: in
#                    a checkout and in an unpacked wheel, where both sit under attention_ports/_assets;
#                    for a port declaring a precision other than float64, that precision's tier,
#                    ../../fixtures/precision/<name>/, "/" in the name written "-")
#   --case GLOB      only the cases whose id matches GLOB (* ? [...]); repeatable
#   --junit FILE     also write a JUnit XML report (one <testcase> per case)
#   --json FILE      also write the results as `attention-ports verify --json` does (per output)
#   --strict         a `missing` case (an operation the port does not implement) fails the run
#                    (a failed @test, a JUnit <failure>), still counted as missing
#
# Exactly the Python suite's judgement (`attention-ports verify --port julia=PORT.jl`): the same
# fixtures, through fixtures/index.tsv (Julia's stdlib reads no JSON; the index is generated from
# the manifest and drift-gated with it); the same call of each operation, made by the same code as
# the Python suite's Julia worker (ports/julia/worker.jl, included here: the port in a fresh module,
# finding its functions and declaration, flattening its results); arrays in the port's own
# feature-major layout (every axis reversed: tokens are columns); the same comparison rule: an
# element agrees iff both are NaN, or both the same infinity, or both finite and
# |actual - expected| <= bound, its own bound from bound.<name>.npy. A port's declared
# `masked_query` convention picks expected.<name>.<convention>.npy where the fixtures have one.
#
# Per case and output: pass, fail (worst element in 1-based indices of the Julia result, expected,
# actual, bound, abs/rel/ulp error, err/bound; an output the operation owes and did not return),
# error (the port's own exception and backtrace) or missing (an operation the port does not
# implement: `@test_skip`, a failed @test under --strict). One @testset per case, inside one per
# operation. Ends with the line `julia conformance: N passed, M failed, K missing` (cases, each
# counted once: N + M + K is every case) and exits 0 when nothing failed, 1 when something did (or,
# with --strict, something was missing; or, under CI=true, nothing passed), 2 for bad usage or bad
# fixtures, 3 when this runner itself broke.
#
# A port's declared `precision` (attention_ports/spec/precision.py; docs/precision.md) is the
# arithmetic it is run and judged in, as `verify` does it (attention_ports/runtimes/precision.py):
# at float32 and the mixed tiers ("bfloat16/float32", "float16/float32") its floating arrays and
# float options are given as Float32, at float16 as Float16 (the tier's inputs are values of its
# storage format, so exactly); its results are widened to Float64 (exact) and judged on the tier's
# fixtures, whose index names the precision; ulps are those of the storage format
# (attention_ports/judge/compare.py, ulp_of). A --fixtures folder of another precision is bad usage.
#
# Unlike the Python suite, the port runs in this Julia process, unsupervised: a port that hangs,
# crashes or exits takes the run with it.

# Started on a system image that already holds this runner, compiled (the test suite's image:
# scripts/build_julia_sysimage.py), run that copy, but only when it was built from these very files
# at this very path (built_from); on any other julia, or for a moved or edited runner, the module
# below is defined as usual. The answers are the same either way; only the compile time differs.
if abspath(PROGRAM_FILE) == abspath(@__FILE__) && isdefined(Main, :AttentionPortsConformance) &&
   Main.AttentionPortsConformance.built_from(@__FILE__)
    exit(Main.AttentionPortsConformance.run(ARGS))
end

module AttentionPortsConformance

using Printf: @printf, @sprintf
using SHA: sha256
using Test

include(joinpath(@__DIR__, "worker.jl"))   # module JuliaPortWorker: how the suite calls a port
const W = JuliaPortWorker

# What this copy of the runner was made from: the guard at the top of this file compares them.
const ORIGIN = abspath(@__FILE__)
_sources(file::String) = (read(file, String), read(joinpath(dirname(file), "worker.jl"), String))
const SOURCES = _sources(ORIGIN)
built_from(file::String) = abspath(file) == ORIGIN && _sources(abspath(file)) == SOURCES

const INDEX_FORMAT, FIXTURE_FORMAT = "1", "2"
const MASKED_QUERY = ("zeros", "nan", "uniform")
const PAIRINGS = ("halves", "interleaved")   # attention_ports/spec/pairing.py; the first is the default
const PAIRING_OPS = ("rotary_embedding",)
const OUTCOMES = ("pass", "missing", "fail", "error")   # worst last, as the Python runner ranks them
const FIELDS = ("operations", "masked_query", "precision", "rope_pairing")   # attention_ports/runtimes/declaration.py

# attention_ports/spec/precision.py's FORMATS, in its order: what a port is called with (the Julia
# type of its arithmetic), and the storage format its ulps are counted in (mantissa bits p, the
# implicit bit included; the smallest normal 2^e). The mixed tiers compute in Float32 on storage
# values (Julia 1.5 has no BFloat16 without a package), as the Python suite runs our port.
struct Precision
    name::String
    T::Type{<:AbstractFloat}
    storage::String
    mantissa_bits::Int
    min_normal_exp::Int
end
const FORMATS = [Precision("float64", Float64, "float64", 53, -1022), Precision("float32", Float32, "float32", 24, -126),
                 Precision("bfloat16/float32", Float32, "bfloat16", 8, -126),
                 Precision("float16/float32", Float32, "float16", 11, -14), Precision("float16", Float16, "float16", 11, -14)]
const FLOAT64 = FORMATS[1]
format_of(name::AbstractString) = FORMATS[findfirst(f -> f.name == name, FORMATS)]
dirname_of(p::Precision) = replace(p.name, "/" => "-")   # spec.precision.Format.dirname

struct UsageError <: Exception
    msg::String
end
usage(msg...) = throw(UsageError(string(msg...)))

# ------------------------------------------------------------------------------------------------
# Arguments

mutable struct Options
    fixtures::Union{Nothing,String}
    cases::Vector{String}
    junit::Union{Nothing,String}
    json::Union{Nothing,String}
    strict::Bool
    help::Bool
    ports::Vector{String}
end

function parse_args(argv::Vector{String})
    o = Options(nothing, String[], nothing, nothing, false, false, String[])
    takes = ("--fixtures", "--case", "--junit", "--json")
    i = 1
    while i <= length(argv)
        a, value = argv[i], nothing
        m = match(r"^(--[a-z]+)=(.*)$"s, a)
        m === nothing || ((a, value) = (String(m.captures[1]), String(m.captures[2])))
        if a in takes
            if value === nothing
                i == length(argv) && usage(a, " needs a value")
                i += 1
                value = argv[i]
            end
            a == "--fixtures" && (o.fixtures = value)
            a == "--case" && push!(o.cases, value)
            a == "--junit" && (o.junit = value)
            a == "--json" && (o.json = value)
        elseif a == "--strict"
            o.strict = true
        elseif a in ("-h", "--help")
            o.help = true
        elseif startswith(a, "-")
            usage("unknown option ", a, " (see --help)")
        else
            push!(o.ports, a)
        end
        i += 1
    end
    o.help || length(o.ports) == 1 || usage(isempty(o.ports) ? "no port given" : "one port (a file or a folder) at a time",
                                            " (see --help)")
    return o
end

# ------------------------------------------------------------------------------------------------
# The fixture index (attention_ports/fixtures/index.py describes the format)

struct OpSpec
    name::String
    slots::Dict{String,Vector{String}}        # args, groups, positional_options, kwargs, options, outputs
    members::Dict{String,Vector{String}}      # group -> its arrays, in order
end

struct ArrayRef
    kind::String          # input, expected, bound
    name::String
    convention::String    # "-" or a masked_query convention
    layout::String
    dtype::String
    shape::Vector{Int}    # the reference (NumPy) shape
    file::String
    sha256::String
end

struct Case
    id::String
    op::String
    options::Vector{Pair{String,Any}}
    arrays::Vector{ArrayRef}
end

struct Index
    ops::Dict{String,OpSpec}
    op_order::Vector{String}
    cases::Vector{Case}
    precision::Precision     # the index's `precision` record; float64 (the main fixtures) without one
end

function default_fixtures()
    for d in (joinpath(@__DIR__, "..", "..", "fixtures"),)
        isfile(joinpath(d, "index.tsv")) && return abspath(d)
    end
    usage("no fixtures found next to ", @__DIR__, " (pass --fixtures DIR)")
end

names_list(s::AbstractString) = s == "-" ? String[] : String.(split(s, ','))

function option_value(type::AbstractString, value::AbstractString)
    type == "null" && return nothing
    type == "bool" && return value == "true"
    type == "int" && return parse(Int64, value)
    type == "float" && return parse(Float64, value)
    type == "str" && return String(value)
    type == "strs" && return names_list(value)
    usage("unknown option type ", type)
end

function read_index(dir::AbstractString)
    path = joinpath(dir, "index.tsv")
    isfile(path) || usage(path, ": no fixture index (fixtures older than the native runners? regenerate with ",
                          "`attention-ports generate --out ", dir, "`)")
    lines = filter(l -> !isempty(l) && !startswith(l, "#"), readlines(path))
    fields = [split(l, '\t') for l in lines]
    isempty(fields) && usage(path, ": not an attention-ports fixture index (empty)")
    head = fields[1]
    (head[1] == "index" && length(head) == 5) || usage(path, ": not an attention-ports fixture index")
    (head[2] == INDEX_FORMAT && head[3] == FIXTURE_FORMAT) ||
        usage(path, ": index format ", head[2], " of fixture format ", head[3], "; this runner reads index format ",
              INDEX_FORMAT, " of fixture format ", FIXTURE_FORMAT, " (use the runner shipped with these fixtures)")
    manifest = joinpath(dir, "manifest.json")
    (isfile(manifest) && bytes2hex(open(sha256, manifest)) == head[4]) ||
        usage(path, ": does not describe ", manifest, " (edited, or stale: run `attention-ports generate`)")
    width = Dict("precision" => 2, "op" => 4, "group" => 4, "case" => 3, "option" => 5, "array" => 11)
    ops, order, cases, by_id = Dict{String,OpSpec}(), String[], Case[], Dict{String,Case}()
    precision = FLOAT64
    for (line, f) in zip(lines[2:end], fields[2:end])
        get(width, f[1], -1) == length(f) || usage(path, ": malformed record: ", line)
        if f[1] == "precision"
            any(p -> p.name == f[2], FORMATS) || usage(path, ": precision ", f[2], " is not one this runner knows")
            precision = format_of(f[2])
        elseif f[1] == "op"
            spec = get!(ops, f[2]) do
                push!(order, f[2])
                OpSpec(f[2], Dict{String,Vector{String}}(), Dict{String,Vector{String}}())
            end
            spec.slots[f[3]] = names_list(f[4])
        elseif f[1] == "group"
            ops[f[2]].members[f[3]] = names_list(f[4])
        elseif f[1] == "case"
            haskey(ops, f[3]) || usage(path, ": case ", f[2], " has an unknown operation ", f[3])
            c = Case(f[2], f[3], Pair{String,Any}[], ArrayRef[])
            push!(cases, c)
            by_id[c.id] = c
        elseif f[1] == "option"
            push!(by_id[f[2]].options, String(f[3]) => option_value(f[4], f[5]))
        else
            shape = [parse(Int, s) for s in split(strip(f[8], ['[', ']']), ',') if !isempty(s)]
            push!(by_id[f[2]].arrays, ArrayRef(f[3], f[4], f[5], f[6], f[7], shape, f[9], f[10]))
        end
    end
    return Index(ops, order, cases, precision)
end

# fnmatch: * ? [seq] [!seq], the whole id, case-sensitive (Python's fnmatch.fnmatchcase).
function glob_regex(glob::AbstractString)
    out = IOBuffer()
    print(out, '^')
    i, chars = 1, collect(glob)
    while i <= length(chars)
        c = chars[i]
        if c == '*'
            print(out, ".*")
        elseif c == '?'
            print(out, '.')
        elseif c == '[' && (j = findnext(==(']'), chars, i + 1 + (get(chars, i + 1, ' ') in ('!', ']')))) !== nothing
            body = String(chars[(i + 1):(j - 1)])
            startswith(body, "!") && (body = "^" * body[2:end])
            print(out, '[', replace(body, "\\" => "\\\\"), ']')
            i = j
        else
            print(out, occursin(c, "\\^\$.|+()[]{}") ? "\\$c" : c)
        end
        i += 1
    end
    print(out, '$')
    return Regex(String(take!(out)))
end

function select_cases(index::Index, globs::Vector{String}, dir::AbstractString)
    isempty(globs) && return index.cases
    res = [glob_regex(g) for g in globs]
    chosen = [c for c in index.cases if any(r -> occursin(r, c.id), res)]
    isempty(chosen) && usage("no case in ", dir, " matches ", join(globs, " or "))
    return chosen
end

# ------------------------------------------------------------------------------------------------
# Fixture arrays (read_npy: fixtures/readers/read_npy.jl, in the reference layout)

struct Expected
    value::Array       # Julia layout
    bound::Array{Float64}
    layout::String
end

const READER = Ref{Any}(nothing)

function load_array(dir::AbstractString, a::ArrayRef)
    path = joinpath(dir, a.file)
    isfile(path) || error("$path: file is missing")
    bytes2hex(open(sha256, path)) == a.sha256 || error("$path: sha256 does not match the fixture index (corrupted or edited)")
    x = Base.invokelatest(READER[], path)
    T = Dict("float64" => Float64, "int64" => Int64, "bool" => Bool)[a.dtype]
    (eltype(x) == T && collect(size(x)) == a.shape) ||
        error("$path: holds $(eltype(x)) $(size(x)), the index says $(a.dtype) $(Tuple(a.shape))")
    return x
end

# Reference layout -> Julia layout: every axis reversed (julia_adapter.py: each role's permutation
# is a full reversal, which is how column-major Julia reads a C-order buffer).
julia_layout(x::AbstractArray) = ndims(x) >= 2 ? permutedims(x, ndims(x):-1:1) : x

function load_case(dir::AbstractString, case::Case, convention::AbstractString)
    inputs = Dict{String,Tuple{Array,String}}()
    expected = Dict{String,Expected}()
    for a in case.arrays
        a.kind == "input" && (inputs[a.name] = (load_array(dir, a), a.layout))
    end
    pick(kind, name) = something(findfirst(a -> a.kind == kind && a.name == name && a.convention == convention, case.arrays),
                                 findfirst(a -> a.kind == kind && a.name == name && a.convention == "-", case.arrays))
    for name in output_names(case)
        e, b = case.arrays[pick("expected", name)], case.arrays[pick("bound", name)]
        expected[name] = Expected(julia_layout(load_array(dir, e)), julia_layout(load_array(dir, b)), e.layout)
    end
    return inputs, expected
end

output_names(case::Case) = unique([a.name for a in case.arrays if a.kind == "expected"])

# ------------------------------------------------------------------------------------------------
# The port, loaded and called through ports/julia/worker.jl

# The case that carries the port's load error: printed with it once, the other cases point at it.
const LOAD_FAILURE_SHOWN = Ref("")

mutable struct Port
    path::String
    mod::Union{Nothing,Module}
    failure::String
    present::Bool
    operations::Union{Nothing,Vector{String}}
    masked_query::String
    precision::Precision
    rope_pairing::String
end

function load_port(path::AbstractString, op_names::Vector{String})
    ispath(path) || usage("julia: port file $path does not exist")
    port = Port(abspath(path), nothing, "", false, nothing, "zeros", FLOAT64, "halves")
    try
        port.mod = W.load_port(port.path)
    catch e
        port.failure = "cannot load $(port.path):\n" * W.error_message(e, catch_backtrace(); stop = ("include", "load_port"))
        return port
    end
    try
        check_declaration!(port, W.declaration(port.mod), op_names)
    catch e
        e isa ErrorException || rethrow()
        port.failure = e.msg
    end
    return port
end

# attention_ports/runtimes/declaration.py: the same checks and messages for Julia's declaration.
function kind_text(x)
    x === nothing && return "NoneType None"
    (x isa NamedTuple || x isa AbstractDict) && return "a named list / NamedTuple"
    (x isa AbstractVector || x isa Tuple) && return "a vector of $(length(x))"
    (x isa AbstractString || x isa Symbol) && return "str $(repr(string(x)))"
    x isa Bool && return "bool $(x ? "True" : "False")"
    x isa Integer && return "int $x"
    x isa AbstractFloat && return "float $x"
    return "a $(typeof(x))"
end

function strings(x)
    (x isa AbstractString || x isa Symbol) && return [string(x)]
    (x isa AbstractVector || x isa Tuple) && all(v -> v isa AbstractString || v isa Symbol, x) && return [string(v) for v in x]
    return nothing
end

function check_declaration!(port::Port, raw, op_names::Vector{String})
    raw === nothing && return port
    where, q = port.path, s -> join(["'$v'" for v in s], ", ")
    (raw isa NamedTuple || raw isa AbstractDict) ||
        error("$where: attention_ports must be a named list / NamedTuple, like const attention_ports = ",
              "(operations = [\"softmax\"], masked_query = \"zeros\"); got $(kind_text(raw))")
    fields = Dict(string(k) => v for (k, v) in pairs(raw))
    unknown = [k for k in keys(fields) if !(k in FIELDS)]
    isempty(unknown) || error("$where: attention_ports has unknown field(s) $(q(sort(unknown))); the fields are $(join(FIELDS, ", "))")
    if haskey(fields, "operations")
        names = strings(fields["operations"])
        names === nothing && error("$where: attention_ports.operations must be a vector of operation names; got $(kind_text(fields["operations"]))")
        bad = [n for n in names if !(n in op_names)]
        isempty(bad) || error("$where: attention_ports.operations names $(q(bad)), not contract operation(s); ",
                              "the operations are $(join(op_names, ", "))")
        port.operations = unique(names)
    end
    if haskey(fields, "masked_query")
        values = strings(fields["masked_query"])
        (values === nothing || length(values) != 1) &&
            error("$where: attention_ports.masked_query must be one of $(q(MASKED_QUERY)); got $(kind_text(fields["masked_query"]))")
        values[1] in MASKED_QUERY || error("$where: attention_ports.masked_query = '$(values[1])' is not one of $(q(MASKED_QUERY))")
        port.masked_query = values[1]
    end
    if haskey(fields, "precision")   # declaration.py's _precision
        values, names = strings(fields["precision"]), [f.name for f in FORMATS]
        (values === nothing || length(values) != 1) &&
            error("$where: attention_ports.precision must be one of $(q(names)); got $(kind_text(fields["precision"]))")
        values[1] in names || error("$where: attention_ports.precision = '$(values[1])' is not a precision; use one of $(q(names))")
        port.precision = format_of(values[1])
    end
    if haskey(fields, "rope_pairing")
        values = strings(fields["rope_pairing"])
        (values === nothing || length(values) != 1 || !(values[1] in PAIRINGS)) &&
            error("$where: attention_ports.rope_pairing must be one of $(q(PAIRINGS)); got ",
                  values !== nothing && length(values) == 1 ? "'$(values[1])'" : kind_text(fields["rope_pairing"]))
        port.rope_pairing = values[1]
    end
    port.present = true
    return port
end

# julia_adapter.build_call: required arrays, each group as a NamedTuple, the positional options
# (nothing when absent), then present optional arrays and options by keyword. Arrays in Julia
# layout; a Bool mask becomes additive (0 keeps, -Inf removes); class indices (layout "index")
# become 1-based; a 0-D array (a label) becomes a plain number. T: the port's arithmetic (its
# declared precision's type): every floating array and float option given as T (a Float64 `scale`
# or `lr` would promote a Float32 computation), as julia_adapter.build_call's `storage`.
function build_call(spec::OpSpec, inputs::Dict{String,Tuple{Array,String}}, options::Vector{Pair{String,Any}},
                    T::Type{<:AbstractFloat} = Float64)
    function array(name)
        a, layout = inputs[name]
        if eltype(a) == Bool
            a = layout == "scores" ? map(x -> x ? zero(T) : T(-Inf), a) : T.(a)
        elseif eltype(a) <: AbstractFloat
            a = T.(a)
        end
        layout == "index" && (a = map(x -> x + one(x), a))   # broadcasting would turn a 0-D array into a number
        j = julia_layout(a)
        return ndims(j) == 0 ? j[] : j
    end
    function option(name)
        i = findfirst(p -> p.first == name, options)
        i === nothing && return nothing
        v = options[i].second
        return v isa AbstractFloat ? T(v) : v
    end
    args = Any[]
    for n in spec.slots["args"]
        haskey(inputs, n) || error("$(spec.name): required input '$n' is absent")
        push!(args, array(n))
    end
    for g in spec.slots["groups"]
        present = [m for m in spec.members[g] if haskey(inputs, "$g.$m")]
        push!(args, NamedTuple{Tuple(Symbol.(present))}(Tuple(array("$g.$m") for m in present)))
    end
    append!(args, [option(n) for n in spec.slots["positional_options"]])
    kwargs = Pair{Symbol,Any}[Symbol(n) => array(n) for n in spec.slots["kwargs"] if haskey(inputs, n)]
    append!(kwargs, [Symbol(n) => option(n) for n in spec.slots["options"] if option(n) !== nothing])
    return args, kwargs
end

# julia_adapter.unpack_results: a bare array is the single output; a plain Tuple or several bare
# arrays are errors; names the operation does not declare are dropped; an absent output is left out
# (run_case fails it, and judges the others), but a result with none of them is the port's error.
function unpack_results(spec::OpSpec, results)
    outputs = spec.slots["outputs"]
    wanted = join(["$o = ..." for o in outputs], ", ")
    out = Dict{String,Array{Float64}}()
    for (name, a) in results
        if name == "" && length(outputs) == 1
            name = outputs[1]
        elseif name == "" || any(startswith(p, "#") for p in split(name, '.'))
            error("$(spec.name) returned $(name == "" ? "an array" : "a plain Tuple"); return a NamedTuple ($wanted) ",
                  "or a Dict with those keys")
        end
        (name in outputs || split(name, '.'; limit = 2)[1] in outputs) && (out[name] = a)
    end
    isempty(out) && error("$(spec.name) returned none of its outputs (it returned: ",
                          isempty(results) ? "nothing" : join(sort([r.first for r in results]), ", "), "); expected ($wanted)")
    return out
end

# ------------------------------------------------------------------------------------------------
# The comparison rule (attention_ports/judge/compare.py)

struct Comparison
    ok::Bool
    mismatches::Int
    total::Int
    worst::Union{Nothing,Int}       # linear (column-major) index in the Julia layout
    max_abs_err::Float64
    max_rel_err::Float64
    max_ulp_err::Float64
    max_err_over_bound::Float64
    nan_only_expected::Vector{Int}
    nan_only_actual::Vector{Int}
end

spacing(x::Float64) = nextfloat(x) - x     # NumPy's spacing for x >= 0

# compare.ulp_of: the spacing of the judged precision's storage format at a magnitude x >= 0:
# NumPy's spacing for float64; else 2^(e - p + 1) in the binade [2^e, 2^(e+1)), the smallest
# normal's spacing below it (exact: powers of two).
function ulp_of(x::Float64, p::Precision)
    p.name == "float64" && return spacing(x)
    return 2.0^(exponent(max(x, 2.0^p.min_normal_exp)) - p.mantissa_bits + 1)
end
ulps_text(p::Precision) = p.name == "float64" ? "ulps" : "ulps of $(p.storage)"   # compare.Comparison._ulps

function compare(e::Array{Float64}, a::Array{Float64}, b::Array{Float64}, p::Precision = FLOAT64)
    n = length(e)
    bad = falses(n)
    diff, frac, rel, ulp = zeros(n), zeros(n), zeros(n), zeros(n)
    for i in 1:n
        ei, ai, bi = e[i], a[i], b[i]
        matched = (isnan(ei) && isnan(ai)) || (isinf(ei) && ai == ei)
        finite = isfinite(ei) && isfinite(ai)
        d = matched ? 0.0 : finite ? abs(ai - ei) : Inf
        diff[i] = d
        bad[i] = !matched && !(finite && d <= bi)
        frac[i] = bi > 0 ? d / bi : (d > 0 ? Inf : 0.0)
        if isfinite(ei) && abs(ei) > bi && ei != 0
            rel[i] = d / abs(ei)
            ulp[i] = d / ulp_of(abs(ei), p)
        end
    end
    top(x) = isempty(x) ? 0.0 : maximum(x)
    worst = nothing
    if any(bad)   # the first maximum in column-major order of the Julia layout = C order of the reference's
        score = [bad[i] ? frac[i] : -1.0 for i in 1:n]
        worst = argmax(score)
    end
    return Comparison(!any(bad), count(bad), n, worst, top(diff), top(rel), top(ulp), top(frac),
                      [i for i in 1:n if isnan(e[i]) && !isnan(a[i])], [i for i in 1:n if isnan(a[i]) && !isnan(e[i])])
end

fmt3(x::Real) = isnan(x) ? "nan" : isinf(x) ? (x > 0 ? "inf" : "-inf") : @sprintf("%.3g", x)
index_text(k::Int, dims) = "[" * join(Tuple(CartesianIndices(dims)[k]), ", ") * "]"

function positions_text(ks::Vector{Int}, dims)
    shown = join([index_text(k, dims) for k in ks[1:min(5, end)]], ", ")
    return length(ks) > 5 ? "$shown and $(length(ks) - 5) more" : shown
end

# compare.Comparison.describe, with the indices of the Julia result (1-based).
function describe(case_id, output, c::Comparison, e, a, b, p::Precision = FLOAT64)
    dims = size(e)
    pct = @sprintf("%.1f", 100 * c.mismatches / max(c.total, 1))
    lines = ["case '$case_id', output '$output': $(c.mismatches) of $(c.total) elements ($pct%) differ beyond their error bounds"]
    if c.worst !== nothing
        k = c.worst
        ev, av, bv = e[k], a[k], b[k]
        abs_err = abs(av - ev)
        rel = ev != 0 ? abs_err / abs(ev) : Inf
        ulps = isfinite(ev) ? abs_err / ulp_of(abs(ev), p) : Inf
        f = bv > 0 ? abs_err / bv : Inf
        push!(lines, "  worst at $(index_text(k, dims)) (1-based): expected $(repr(ev)), actual $(repr(av)), bound $(fmt3(bv)) " *
                     "(abs err $(fmt3(abs_err)), rel err $(fmt3(rel)), $(fmt3(ulps)) $(ulps_text(p)), $(fmt3(f)) x bound)")
    end
    push!(lines, "  max abs err $(fmt3(c.max_abs_err)), max rel err $(fmt3(c.max_rel_err)), max $(fmt3(c.max_ulp_err)) $(ulps_text(p)), " *
                 "worst $(fmt3(c.max_err_over_bound)) x bound")
    isempty(c.nan_only_expected) || push!(lines, "  NaN expected but not found at $(positions_text(c.nan_only_expected, dims))")
    isempty(c.nan_only_actual) || push!(lines, "  NaN found but not expected at $(positions_text(c.nan_only_actual, dims))")
    return join(lines, "\n")
end

shape_text(dims) = length(dims) == 1 ? "($(dims[1]),)" : "(" * join(dims, ", ") * ")"

# ------------------------------------------------------------------------------------------------
# One case

struct OutputResult
    case::String
    output::String
    status::String
    message::String
    errors::Union{Nothing,Comparison}
end

# In a failed `@test r == "pass"`, Test shows r: its status and message, then `== "pass"` on a line of its own.
Base.show(io::IO, r::OutputResult) = print(io, r.status, ": ", replace(r.message, "\n" => "\n    "), "\n   ")
Base.:(==)(r::OutputResult, status::String) = r.status == status   # `@test r == "pass"` shows the message

# attention_ports/spec/pairing.py's for_port: a port takes no `pairing` option; where a case's
# pairing is not the one the port declares, the port gets x's features (reference layout: columns)
# permuted into its own pairing (exact), and its output (Julia layout: rows) is permuted back.
function for_port(op, inputs, options, declared)
    op in PAIRING_OPS || return inputs, options, nothing
    i = findfirst(p -> p.first == "pairing", options)
    want = i === nothing ? PAIRINGS[1] : options[i].second
    rest = [p for p in options if p.first != "pairing"]
    x, layout = inputs["x"]
    d = size(x, 2)
    (want == declared || ndims(x) != 2 || isodd(d)) && return inputs, rest, nothing
    interleaved_to_halves = vcat(1:2:d, 2:2:d)
    src = want == "interleaved" ? interleaved_to_halves : sortperm(interleaved_to_halves)
    permuted = copy(inputs)
    permuted["x"] = (x[:, src], layout)
    return permuted, rest, sortperm(src)
end

function run_case(dir::AbstractString, index::Index, port::Port, case::Case)
    spec = index.ops[case.op]
    every(status, msg) = [OutputResult(case.id, o, status, msg, nothing) for o in output_names(case)]
    local inputs, expected
    try
        inputs, expected = load_case(dir, case, port.masked_query)
    catch e
        e isa ErrorException || rethrow()
        return every("error", "case '$(case.id)': fixture error: $(e.msg)")
    end
    if !isempty(port.failure)  # the load error whole on the first case, a pointer to it on the others
        if isempty(LOAD_FAILURE_SHOWN[])
            LOAD_FAILURE_SHOWN[] = case.id
            return every("error", "case '$(case.id)': julia raised: $(port.failure)")
        end
        return every("error", "case '$(case.id)': julia: the port $(port.path) did not load: its error is in case '$(LOAD_FAILURE_SHOWN[])'")
    end
    if port.operations !== nothing && !(case.op in port.operations)
        return every("missing", "case '$(case.id)': $(case.op) is not among the operations $(port.path) declares (attention_ports)")
    end
    status, msg, results = try
        call_inputs, call_options, back = for_port(case.op, inputs, case.options, port.rope_pairing)
        args, kwargs = build_call(spec, call_inputs, call_options, index.precision.T)
        reply = W.call_op(port.mod, port.path, case.op, args, kwargs)
        if back !== nothing && reply[1] === :ok
            reply = (reply[1], reply[2], [n in ("output", "") && a isa AbstractMatrix && size(a, 1) == length(back) ?
                                          (n => a[back, :]) : (n => a) for (n, a) in reply[3]], reply[4:end]...)
        end
        reply
    catch e
        e isa InterruptException && rethrow()
        (:error, "$(case.op): " * sprint(showerror, e), nothing)
    end
    if status === :missing
        port.operations === nothing && return every("missing", "case '$(case.id)': $msg")
        status, msg = :error, "$(case.op) is declared in attention_ports.operations of $(port.path) but the port defines no $(case.op)"
    end
    actual = nothing
    if status === :ok
        try
            actual = unpack_results(spec, results)
        catch e
            e isa ErrorException || rethrow()
            status, msg = :error, e.msg
        end
    end
    status === :ok || return every("error", "case '$(case.id)': julia raised: $msg")
    out = OutputResult[]
    for name in output_names(case)
        exp = expected[name]
        if !haskey(actual, name)
            push!(out, OutputResult(case.id, name, "fail", "case '$(case.id)', output '$name': not returned " *
                                                            "(returned: $(join(sort(collect(keys(actual))), ", ")))", nothing))
            continue
        end
        act = actual[name]
        if size(act) != size(exp.value)
            push!(out, OutputResult(case.id, name, "fail", "case '$(case.id)', output '$name': shape mismatch: expected " *
                                                            "$(shape_text(size(exp.value))), actual $(shape_text(size(act)))", nothing))
            continue
        end
        e = convert(Array{Float64}, exp.value)
        c = compare(e, act, exp.bound, index.precision)
        push!(out, OutputResult(case.id, name, c.ok ? "pass" : "fail",
                                c.ok ? "" : describe(case.id, name, c, e, act, exp.bound, index.precision), c))
    end
    return out
end

case_status(outputs) = isempty(outputs) ? "error" : OUTCOMES[maximum(findfirst(==(o.status), OUTCOMES) for o in outputs)]

# ------------------------------------------------------------------------------------------------
# Reports: Test (a @testset per case), JUnit XML, JSON (the `verify --json` schema)

function report_test(case::Case, outputs::Vector{OutputResult}, strict::Bool)
    @testset "$(case.id)" begin
        status = case_status(outputs)
        if status == "missing" && strict   # Test's own summary shows what fails the run
            println("  $(case.id): missing (--strict: a missing operation fails): $(outputs[1].message)")
            @test outputs[1] == "pass"
        elseif status == "missing"
            println("  $(case.id): missing: $(outputs[1].message)")
            @test_skip outputs[1] == "pass"
        elseif status == "error"      # the port raised (or the case could not run): once, not per output
            @test outputs[1] == "pass"
        else
            for r in outputs
                @test r == "pass"
            end
        end
    end
end

function xml_escape(s::AbstractString)
    s = replace(s, r"[\x00-\x08\x0b\x0c\x0e-\x1f]" => "?")
    for (a, b) in ("&" => "&amp;", "<" => "&lt;", ">" => "&gt;", "\"" => "&quot;")
        s = replace(s, a => b)
    end
    return s
end

function junit_xml(runs, port_path::AbstractString, seconds::Float64, strict::Bool)
    count(rs, what::Vector{String}) = sum(Int[case_status(r.outputs) in what for r in rs])
    # A missing case is skipped, or a failure under --strict (as `verify --junit` writes it). Vectors,
    # not tuples: Julia 1.5's compiler crashed on `in` over an empty tuple here.
    failing = strict ? ["fail", "missing"] : ["fail"]
    skipping = strict ? String[] : ["missing"]
    io = IOBuffer()
    println(io, """<?xml version="1.0" encoding="UTF-8"?>""")
    @printf(io, """<testsuites name="attention-ports conformance (julia)" tests="%d" failures="%d" errors="%d" skipped="%d" time="%.3f">\n""",
            length(runs), count(runs, failing), count(runs, ["error"]), count(runs, skipping), seconds)
    for op in unique([r.case.op for r in runs])
        rs = [r for r in runs if r.case.op == op]
        @printf(io, """  <testsuite name="julia.%s" tests="%d" failures="%d" errors="%d" skipped="%d" time="%.3f">\n""",
                op, length(rs), count(rs, failing), count(rs, ["error"]), count(rs, skipping), sum(r.seconds for r in rs))
        println(io, """    <properties><property name="port" value="$(xml_escape(port_path))"/></properties>""")
        for r in rs
            @printf(io, """    <testcase classname="julia.%s" name="%s" time="%.3f">\n""", op, r.case.id, r.seconds)
            status = case_status(r.outputs)
            tag = get(Dict("fail" => "failure", "error" => "error", "missing" => (strict ? "failure" : "skipped")), status, nothing)
            if tag !== nothing
                bad = [o for o in r.outputs if o.status != "pass"]
                text = xml_escape(join(unique([o.message for o in bad]), "\n"))
                first = xml_escape(split(bad[1].message, '\n')[1])
                println(io, """      <$tag message="$first" type="$status">$text</$tag>""")
            end
            println(io, "    </testcase>")
        end
        println(io, "  </testsuite>")
    end
    println(io, "</testsuites>")
    return String(take!(io))
end

function json_string(s::AbstractString)
    io = IOBuffer()
    print(io, '"')
    for c in s
        if c == '"' || c == '\\'
            print(io, '\\', c)
        elseif c == '\n'
            print(io, "\\n")
        elseif c == '\t'
            print(io, "\\t")
        elseif c == '\r'
            print(io, "\\r")
        elseif c < ' '
            @printf(io, "\\u%04x", UInt32(c))
        else
            print(io, c)
        end
    end
    print(io, '"')
    return String(take!(io))
end

json_number(x) = x === nothing ? "null" : isfinite(x) ? repr(x) : json_string(fmt3(x))

function results_json(runs, port::Port, precision::Precision)
    rows = String[]
    for r in runs, o in r.outputs
        c = o.errors
        num(f) = c === nothing ? "null" : json_number(f(c))
        push!(rows, "  {\"impl\": \"julia\", \"case\": $(json_string(o.case)), \"output\": $(json_string(o.output)), " *
                    "\"status\": $(json_string(o.status)), \"max_abs_err\": $(num(x -> x.max_abs_err)), " *
                    "\"max_rel_err\": $(num(x -> x.max_rel_err)), \"max_ulp_err\": $(num(x -> x.max_ulp_err)), " *
                    "\"err_over_bound\": $(num(x -> x.max_err_over_bound)), \"message\": $(json_string(o.message))}")
    end
    meta = "{\"runner\": \"ports/julia/conformance.jl\", \"port\": $(json_string(port.path)), " *
           "\"masked_query\": $(json_string(port.masked_query)), \"precision\": $(json_string(precision.name)), \"julia\": $(json_string(string(VERSION)))}"
    return "{\n\"version\": 2,\n\"meta\": $meta,\n\"results\": [\n$(join(rows, ",\n"))\n]\n}\n"
end

function write_atomically(path::AbstractString, text::AbstractString)
    tmp, io = mktemp(dirname(abspath(path)))
    try
        write(io, text)
        close(io)
        mv(tmp, path; force = true)
    catch
        isfile(tmp) && rm(tmp)
        rethrow()
    end
end

# ------------------------------------------------------------------------------------------------

const HELP = """
usage: julia conformance.jl [--fixtures DIR] [--case GLOB]... [--junit FILE] [--json FILE] [--strict] PORT.jl|PORTDIR
Judges a Julia port against the attention-ports fixtures (see the comment at the top of this file)."""

struct Run
    case::Case
    outputs::Vector{OutputResult}
    seconds::Float64
end

function counts(ts::Test.DefaultTestSet)   # DefaultTestSet's fields are the same on Julia 1.5 to 1.11
    passed, failed = ts.n_passed, 0
    for r in ts.results
        if r isa Test.DefaultTestSet
            p, f = counts(r)
            passed, failed = passed + p, failed + f
        elseif r isa Test.Fail || r isa Test.Error
            failed += 1
        end
    end
    return passed, failed
end

function main(argv::Vector{String})
    opts = parse_args(argv)
    if opts.help
        println(HELP)
        return 0
    end
    dir = opts.fixtures === nothing ? default_fixtures() : abspath(opts.fixtures)
    isdir(dir) || usage("--fixtures ", opts.fixtures, ": no such folder")
    index = read_index(dir)
    opts.fixtures === nothing || select_cases(index, opts.cases, dir)   # bad usage named before the port loads
    reader = Module(:Reader)
    Base.include(reader, reader_file(dir))
    READER[] = getfield(reader, :read_npy)
    # Compiled now, not at its first call: Julia 1.5.3 aborted there ("jl_generate_fptr_for_unspecialized:
    # Assertion `src && jl_is_code_info(src)' failed") when a garbage collection had run in between.
    precompile(READER[], (String,))
    port = load_port(opts.ports[1], index.op_order)
    dir, index = tier_fixtures(opts, dir, index, port)   # the port's declared precision picks the tier
    cases = select_cases(index, opts.cases, dir)
    cases = cases[sortperm([findfirst(==(c.op), index.op_order) for c in cases]; alg = MergeSort)]  # one @testset per operation
    # A function barrier: compiling what judges the cases takes seconds, which bad usage and bad
    # fixtures (above) need not wait for.
    return Base.invokelatest(judge, opts, dir, index, cases, port)
end

# The fixtures a port is judged on: its declared precision's tier when no --fixtures is given
# (spec.precision.fixtures_dir); a --fixtures folder must be of the precision it declares. A port
# that did not load is judged (every case an error) where it stands.
function tier_fixtures(opts::Options, dir::String, index::Index, port::Port)
    isempty(port.failure) || return dir, index
    p = port.precision
    if opts.fixtures === nothing
        p === FLOAT64 && return dir, index
        tier = joinpath(dir, "precision", dirname_of(p))
        isdir(tier) || usage(port.path, " declares precision = ", p.name, " but ", tier,
                             " does not exist (fixtures older than precision tiers?)")
        tindex = read_index(tier)
        tindex.precision === p || usage(tier, ": its index is for ", tindex.precision.name, ", not ", p.name)
        return tier, tindex
    end
    index.precision === p && return dir, index
    want = p === FLOAT64 ? "the main fixtures folder" : "its tier, <fixtures>/precision/$(dirname_of(p))"
    usage("--fixtures ", opts.fixtures, " is for precision ", index.precision.name, " (its index.tsv), but ", port.path,
          " declares precision = ", p.name, ": use ", want, " (or leave --fixtures out)")
end

# The .npy reader: the fixtures folder's own readers/read_npy.jl; a tier folder has none and uses
# the main folder's, two levels up (fixtures/precision/<name>/).
function reader_file(dir::String)
    own = joinpath(dir, "readers", "read_npy.jl")
    return isfile(own) ? own : joinpath(dir, "..", "..", "readers", "read_npy.jl")
end

function judge(opts::Options, dir::String, index::Index, cases::Vector{Case}, port::Port)
    declared = port.present ? "masked_query = $(port.masked_query)" : "no declaration"
    println("julia conformance: port $(port.path) ($declared), precision $(index.precision.name), ",
            "$(length(cases)) case(s) from $dir")
    LOAD_FAILURE_SHOWN[] = ""  # a load error is printed with the first case, once
    runs = Run[]
    started = time()
    ts = Test.DefaultTestSet("julia conformance")
    Test.push_testset(ts)
    try
        for op in unique([c.op for c in cases])
            @testset "$op" begin
                for case in cases
                    case.op == op || continue
                    t0 = time()
                    outputs = run_case(dir, index, port, case)
                    push!(runs, Run(case, outputs, time() - t0))
                    report_test(case, outputs, opts.strict)
                end
            end
        end
    finally
        Test.pop_testset()
    end
    seconds = time() - started
    Test.print_test_results(ts)
    statuses = [case_status(r.outputs) for r in runs]
    opts.junit === nothing || write_atomically(opts.junit, junit_xml(runs, port.path, seconds, opts.strict))
    opts.json === nothing || write_atomically(opts.json, results_json(runs, port, index.precision))
    # Each case counted once, as `verify` counts it; --strict makes a missing case fail the run,
    # it does not count it twice.
    failed = sum(Int[s in ("fail", "error") for s in statuses])
    n_missing = sum(Int[s == "missing" for s in statuses])   # not `missing`: Base's, used by Test
    passed = sum(Int[s == "pass" for s in statuses])
    @printf("julia conformance: %d passed, %d failed, %d missing%s (%.1f s)\n", passed, failed,
            n_missing, opts.strict && n_missing > 0 ? ", failing under --strict" : "", seconds)
    # As `verify` and the pytest plugin: under CI=true a run that passed nothing is not green.
    none_passed = lowercase(get(ENV, "CI", "")) in ("1", "true", "yes") && !isempty(runs) && passed == 0
    none_passed && println("CI: no case passed: refusing to call this run green")
    return failed > 0 || (opts.strict && n_missing > 0) || none_passed ? 1 : 0
end

function run(argv::Vector{String})
    try
        return main(argv)
    catch e
        if e isa UsageError
            println(stderr, "julia conformance: ", e.msg)
            return 2
        end
        println(stderr, "julia conformance: internal error: ", sprint(showerror, e, catch_backtrace()))
        return 3
    end
end

end # module AttentionPortsConformance

if abspath(PROGRAM_FILE) == abspath(@__FILE__)
    exit(AttentionPortsConformance.run(ARGS))
end
