# Our Julia port (ports/julia/src), unchanged, declared float32: the suite calls it with Float32
# arguments and judges it on the float32 tier (docs/precision.md, "Declaring a port's precision").
# Its code is generic over T<:AbstractFloat, as Flux/NNlib code is: no second port. Every family's
# file is loaded, in name order as the Julia adapter loads ports/julia/src, so a new family is
# judged here too. They go into a module of their own (the worker finds operations there,
# ports/julia/worker.jl find_op) because the port declares itself (positions.jl: its rotary
# pairing): this file's declaration is the port's plus the precision. (Base.include: the port is
# loaded into a bare module, which has no `include` of its own.)
module Ours
const SRC = joinpath(@__DIR__, "..", "..", "..", "..", "ports", "julia", "src")
for file in filter(f -> endswith(f, ".jl"), readdir(SRC))  # readdir sorts by name
    Base.include(@__MODULE__, joinpath(SRC, file))
end
end

const attention_ports = merge(Ours.attention_ports, (precision = "float32",))
