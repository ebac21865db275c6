# Our Julia port (ports/julia/src), unchanged, declared float32: the suite calls it with Float32
# arguments and judges it on the float32 tier (docs/precision.md, "Declaring a port's precision").
# Its code is generic over T<:AbstractFloat, as Flux/NNlib code is: no second port. (Base.include:
# the port is loaded into a bare module, which has no `include` of its own.)
for file in ("attention.jl", "classifier.jl")
    Base.include(@__MODULE__, joinpath(@__DIR__, "..", "..", "..", "..", "ports", "julia", "src", file))
end

const attention_ports = (precision = "float32",)
