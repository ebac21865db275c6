# KNOWN-BAD port (not ours): seed 003's published Julia code (shared/seeds/003_e068e4378e9740fd.txt)
# transcribed into the port contract with exactly ONE of its defects kept: the backward pass.
# tests/test_seed003_known_bad.py runs this file as a user port and asserts exactly which
# (case, output) pairs the suite flags.
#
# Kept from the seed (its `backprop`, verbatim): the softmax Jacobian is built once, from the
# linearly indexed α[j], which reads the FIRST COLUMN of the n × n matrix α (the weight every query
# gives key 1), and that one Jacobian is multiplied across every row (∂L_∂e = ∂L_∂α*∂α_∂e); and
# ∂L_∂q, ∂L_∂k lack the 1/sqrt factor of the scores. So the W_q/b_q/W_k/b_k gradients are wrong
# whenever n > 1 (for n = 1 the Jacobian is [α(1-α)] = [0] either way); everything else is right.
#
# Fixed here, so that only the backward differs: the scores are scaled by sqrt(d) = sqrt(size(q, 1))
# instead of the seed's sqrt(length(q)) = sqrt(d*n) (seed003_scale_bug.jl keeps that one). Not
# reproduced because it is no part of these operations: the seed's initialisation `V = K` (one
# array shared by the value and key weights until the first update); the caller passes w_v.
#
# Adapted to the contract, not to the math: the seed's α is n_q × n_k (a softmax per ROW) and its
# z = v*α'; the contract's weights are n_k × n_q, so α' is returned. Biases are vectors (the seed's
# are d×1 matrices), so bias gradients are returned with vec(). The feed-forward layer is trained
# unless `frozen` names it (the seed comments out its W, b updates). Labels arrive 1-based and
# become the seed's one-hot y. `range(0, n-1)` needs Julia >= 1.7, so the position row is written
# `0:(n-1)`. The epoch loss is the mean over the sentences trained (the seed divides its sum by
# every row of the CSV, the empty one included).

# Added for the port contract (ports/CONTRACT.md, "Declaring what a port offers"): the seed's
# `softmax` below normalises the WHOLE array (its attention applies it to one query's scores), so it
# is not the contract's column-wise softmax; declared, only the classifier operations are called.
const attention_ports = (operations = ["classifier_forward", "classifier_step", "classifier_train"],)

# Softmax function
function softmax(x)
    x = x .- maximum(x)
    return exp.(x) ./ sum(exp.(x))
end

# Cross Entropy Loss
function CrossEntropyLoss(z,x)
    return -sum(x.*log.(z))
end

# Linear Transformation
function LinearTransform(x,W,b)
    return W*x.+b
end

# Feedforward network
function FeedForward(x,W,b)
    return LinearTransform(x,W,b)
end

# Return Attention Weights
function AttentionWeights(x,q,k,v)
    # compute similarity between queries and keys (with scaling)
    e = q'*k/sqrt(size(q)[1])   # FIXED here: the seed divides by sqrt(length(q)) = sqrt(d*n)

    # initialize attention weight matrix α with zeroes
    α = zeros(size(e))

    # normalize each similarity row with softmax
    for row in 1:size(e)[1]
        α[row,:] = softmax(e[row,:])
    end
    return α
end

# Attention block
function Attention(x,Q,Qb,K,Kb,V,Vb)
    # queries
    q = LinearTransform(x,Q,Qb)
    # keys
    k = LinearTransform(x,K,Kb)
    # values
    v = LinearTransform(x,V,Vb)

    # Attention Weights
    α = AttentionWeights(x,q,k,v)

    # context vectors
    z = v * α'
    return q,k,v,α,z
end

# Forward propagate (also returns f and the pooled vector, which the contract asks for)
function forwardprop(x,Q,Qb,K,Kb,V,Vb,W,b)
    # Reshape from 1d to 2d
    if ndims(x)==1
        x = reshape(x,(:,1))
    end
    x = vcat(x,Vector(0:(size(x)[2]-1))')

    # Return attention values
    q,k,v,α,z = Attention(x,Q,Qb,K,Kb,V,Vb)

    # Feed Forward layer
    f = FeedForward(z,W,b)  #shape: [3xn]

    # Average pooling.
    pooled = sum(f,dims=2)/size(f)[2]  #shape: [3x1]

    # Softmax layer to get probabilities
    p = softmax(pooled)

    return x,q,k,v,α,z,f,pooled,p
end

# Backpropagate: the seed's gradients, verbatim; the update step is `sgd` below
function backprop(x,y,
                Q,Qb,K,Kb,V,Vb,W,b,
                q,k,v,α,z,p)
    # Softmax gradient ∂L/∂σ
    ∂L_∂p = p-y    #shape: [3x1]

    # Average pooling gradient ∂L/∂f
    ∂p_∂f = (1 ./size(z)[2] .*ones(1,size(z)[2]))
    ∂L_∂f = ∂L_∂p*∂p_∂f  #shape: [3xn]

    # NN local gradients ∂f/∂z, ∂f/∂W
    ∂f_∂z = W  #shape: [3xd]
    ∂f_∂W = z' #shape: [4xd]

    # NN gradients ∂L/∂W and ∂L/∂b
    ∂L_∂W = ∂L_∂f*∂f_∂W  #shape: [3xd]
    ∂L_∂b = sum(∂L_∂f,dims=2)  #shape: [3x1]

    # Context vector gradients
    ∂L_∂z = (∂L_∂f'*∂f_∂z)' #shape: [dxn]

    # Attention gradients
    # Local value gradients ∂z/∂v, ∂v/∂V
    ∂z_∂v = α  #shape: [nxn]
    ∂v_∂V = x' #shape: [nxd]

    # Local attention weight gradients ∂z/∂α
    ∂z_∂α = v  #shape: [dxn]

    # Initialize ∂α/∂e to zeroes
    ∂α_∂e = zeros(size(α)[1],size(α)[2])  #shape: [nxn]

    # Derivative of softmax
    for k in 1:size(α)[1]
        for j in 1:size(α)[2]
            if j == k
                ∂α_∂e[j,k] = α[j]*(1-α[j])      # THE BUG: α[j] is α[j,1], for every row
            else
                ∂α_∂e[j,k] = -α[k]*α[j]
            end
        end
    end

    # Local query, key gradients ∂e_∂q, ∂e_∂k
    ∂e_∂q, ∂e_∂k = k', q'  #shape: [nxd],[nxd]
    ∂q_∂Q, ∂k_∂K = x', x'  #shape: [nxd],[nxd]

    # Softmax gradients
    ∂L_∂α = ∂L_∂z'*∂z_∂α   #shape: [nxn]

    # Similarity score gradients
    ∂L_∂e = ∂L_∂α*∂α_∂e    #shape: [nxn]       THE BUG: one Jacobian across every row

    # query gradients
    ∂L_∂q = ∂L_∂e*∂e_∂q  #shape: [nxd]         THE BUG: no 1/sqrt(d)
    # key gradients
    ∂L_∂k = ∂L_∂e'*∂e_∂k #shape: [nxd]         THE BUG: no 1/sqrt(d)
    # values gradients
    ∂L_∂v = ∂L_∂z*∂z_∂v  #shape: [dxn]

    # Q,K,V parameter gradients
    ∂L_∂Q = ∂L_∂q'*∂q_∂Q  #shape: [dxd]
    ∂L_∂K = ∂L_∂k'*∂k_∂K  #shape: [dxd]
    ∂L_∂V = ∂L_∂v*∂v_∂V   #shape: [dxd]

    ∂L_∂Qb = sum(∂L_∂q',dims=2)  #shape: [dx1]
    ∂L_∂Kb = sum(∂L_∂k',dims=2) #shape: [dx1]
    ∂L_∂Vb = sum(∂L_∂v,dims=2)  #shape: [dx1]

    return (w_q = ∂L_∂Q, b_q = vec(∂L_∂Qb), w_k = ∂L_∂K, b_k = vec(∂L_∂Kb),
            w_v = ∂L_∂V, b_v = vec(∂L_∂Vb), w_f = ∂L_∂W, b_f = vec(∂L_∂b))
end

# --- the contract's operations ----------------------------------------------------------------

const PARAM_NAMES = (:w_q, :b_q, :w_k, :b_k, :w_v, :b_v, :w_f, :b_f)

# The seed's update step, with the contract's `frozen`: frozen parameters come back unchanged.
function sgd(params, grads, η, frozen)
    return NamedTuple{PARAM_NAMES}(map(name -> String(name) in frozen ? params[name] : params[name] .- η * grads[name],
                                       PARAM_NAMES))
end

function train_step(x_em, label, params, η, frozen)
    P = params
    # One hot vector sentiment (the seed's sent_dict, from the 1-based label)
    y = [i == label ? 1 : 0 for i in 1:size(P.w_f)[1]]
    x,q,k,v,α,z,f,pooled,p = forwardprop(x_em,P.w_q,P.b_q,P.w_k,P.b_k,P.w_v,P.b_v,P.w_f,P.b_f)
    CEloss = CrossEntropyLoss(p,y)
    grads = backprop(x,y,P.w_q,P.b_q,P.w_k,P.b_k,P.w_v,P.b_v,P.w_f,P.b_f,q,k,v,α,z,p)
    return (loss = CEloss, probs = vec(p), grads = grads, params = sgd(params, grads, η, frozen))
end

function classifier_forward(x_emb, params)
    P = params
    x,q,k,v,α,z,f,pooled,p = forwardprop(x_emb,P.w_q,P.b_q,P.w_k,P.b_k,P.w_v,P.b_v,P.w_f,P.b_f)
    return (x = x, q = q, k = k, v = v, weights = Matrix(α'), z = z, f = f, pooled = vec(pooled), probs = vec(p))
end

function classifier_step(x_emb, label, params, lr; frozen = String[])
    return train_step(x_emb, label, params, lr, frozen)
end

# The seed's training loop over the packed data set (tokens e × N, one entry of lengths per row of
# its CSV); empty sentences are skipped like the seed's `if length(sen)!=0`.
function classifier_train(tokens, lengths, labels, params, lr, epochs; frozen = String[])
    ends = cumsum(lengths)
    trained = count(l -> l != 0, lengths)
    epoch_losses = zeros(epochs)
    for epoch=1:epochs
        total_l = 0   #total loss
        for idx in 1:length(lengths)
            l = 0   #current loss
            if lengths[idx]!=0
                x_em = tokens[:, (ends[idx]-lengths[idx]+1):ends[idx]]
                #Update parameters
                step = train_step(x_em, labels[idx], params, lr, frozen)
                params, l = step.params, step.loss
            end
            total_l += l
        end
        epoch_losses[epoch] = total_l/trained
    end
    return (epoch_losses = epoch_losses, params = params)
end
