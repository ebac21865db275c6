# The program a custom system image is built from (scripts/build_julia_sysimage.py runs it as
#   julia --startup-file=no -J STOCK_IMAGE --output-o sys.o julia_sysimage.jl WORKER PORT TRACE RUNNER
# and links sys.o into sys.so). Everything this program defines or compiles ends up in the image:
#   - the worker module (JuliaPortWorker from ports/julia/worker.jl); a worker started on the image
#     runs this copy (`-e 'JuliaPortWorker.serve(ARGS[1])'`, ports/julia_sysimage.py);
#   - our port, loaded as the worker loads any port, bound to `OurPort` and registered in
#     JuliaPortWorker.PRELOADED: a worker serving our port uses it (compiled) while the port's files
#     are byte for byte the ones loaded here, and includes the files afresh otherwise; compiling
#     its traced methods also compiles every Base specialisation they reach (BLAS wrappers,
#     broadcasting, reductions on Matrix{Float64}), which is what any other port gains;
#   - the native conformance runner (module AttentionPortsConformance from RUNNER,
#     ports/julia/conformance.jl), which `julia -J sys.so conformance.jl ...` runs from the image
#     when the file is byte for byte the one loaded here, at the same path (its own guard); the
#     test suite starts its many native runs so (tests/test_native_runners.py), each then skipping
#     ~4 s of compiling the runner;
#   - every `precompile(...)` statement of TRACE (--trace-compile output of the catalogue run through
#     the worker, then of the native runner's runs), the anonymous port module `Port.` renamed to
#     `OurPort.`.
# A statement that no longer resolves (a method renamed since the trace) is counted and skipped.
# Julia 1.5 (the --output-o recipe of PackageCompiler for that version).
worker, port, trace, runner = ARGS

Base.reinit_stdio()
@eval Sys BINDIR = ccall(:jl_get_julia_bindir, Any, ())::String
# and the stdlib folder (the stock image holds the one of the machine that built julia), so that the
# runner's `using Printf, SHA, Test` resolve; both are set again when the image starts
@eval Sys STDLIB = abspath(BINDIR, "..", "share", "julia", "stdlib", string("v", VERSION.major, ".", VERSION.minor))
Base.init_load_path()
Base.init_depot_path()

include(worker)
const OurPort = JuliaPortWorker.load_port(port)
# A worker serving our port from this image finds it here, compiled, as long as its files are
# byte for byte the ones loaded now (JuliaPortWorker.load_port checks).
JuliaPortWorker.PRELOADED[port] = (JuliaPortWorker.port_sources(JuliaPortWorker.port_files(port)), OurPort)
include(runner)  # defines Main.AttentionPortsConformance; runs nothing (PROGRAM_FILE is this file)

let ok = 0, failed = 0
    for line in eachline(trace)
        startswith(line, "precompile(") || continue
        try
            ex = Meta.parse(replace(line, r"\bPort\." => "OurPort."))
            Core.eval(Main, ex) ? (ok += 1) : (failed += 1)
        catch
            failed += 1
        end
    end
    println("julia_sysimage: precompiled $ok statements, $failed did not resolve")
end

# Set again from the environment when the image starts (as for the stock image).
empty!(LOAD_PATH)
empty!(DEPOT_PATH)
