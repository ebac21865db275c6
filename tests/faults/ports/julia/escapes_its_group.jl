# Fault: every call first starts three `sleep`s that leave the worker's process group and session:
# `setsid sleep`, a double fork into a session of its own, and `nohup ... &` then `setsid`; it goes
# on once all three run. Each `sleep`'s command line is `sleep $FAULT_MARKER<op><how><n>` (op: 1
# softmax, 2 self_attention, 3 scaled_dot_product_attention; how: 1, 2, 3 as listed; n: the call's
# number in this worker). Then softmax returns correctly, self_attention exits (a crash), and
# attention hangs (a timeout). Once its sleeps run, a call leaves the flag file $FAULT_FLAG<op>,
# when asked to, so that a test knows they started. None of the sleeps may outlive the run.
const CALLS = Ref(0)

function escape(op)
    n = CALLS[] += 1
    m = get(ENV, "FAULT_MARKER", "987.654") * string(op)
    script = """
    setsid sleep $(m)1$n >/dev/null 2>&1 &
    ( setsid sleep $(m)2$n >/dev/null 2>&1 & ) &
    nohup setsid sleep $(m)3$n >/dev/null 2>&1 &
    n() { pgrep -c -f '^sleep $(m)[123]$n\$'; }
    i=0; while [ "\$(n)" != 3 ] && [ \$i -lt 250 ]; do sleep 0.02; i=\$((i+1)); done
    [ "\$(n)" = 3 ]
    """
    started = success(`sh -c $script`)
    flag = get(ENV, "FAULT_FLAG", "")
    started && !isempty(flag) && touch(flag * string(op))
end

function softmax(x)
    escape(1)
    e = exp.(x .- maximum(x; dims = 1))
    return e ./ sum(e; dims = 1)
end

function self_attention(x, w_q, w_k, w_v; b_q = nothing, b_k = nothing, b_v = nothing, mask = nothing, scale = nothing)
    escape(2)
    exit(3)
end

function scaled_dot_product_attention(q, k, v; mask = nothing, scale = nothing)
    escape(3)
    while true  # waits, as hangs.jl does (its comment says why)
        sleep(3600)
    end
end
