# Echoes what the adapter passed, to check argument conversion (used with a test-only op spec).

echo_args <- function(x, cube, num_heads, params, counts = NULL, mask = NULL, name = NULL,
                      frozen = NULL, scale = NULL, flag = NULL) {
  list(
    x = x,
    cube = cube,
    types = list(
      num_heads_is_integer = is.integer(num_heads),
      scale_is_double = is.double(scale),
      name_is_character = is.character(name) && length(name) == 1L,
      frozen_length = if (is.character(frozen)) length(frozen) else -1,
      flag_is_logical = is.logical(flag),
      counts_is_integer = is.integer(counts),
      params_is_list = is.list(params)
    ),
    num_heads = num_heads,
    scale = scale,
    name_chars = nchar(name),
    frozen_nchar = nchar(frozen),
    params = params,
    param_names = length(names(params)),
    counts = counts,
    mask = mask,
    scalar = 42,
    vector = c(1L, 2L, 3L),
    logical = c(TRUE, FALSE),
    array3 = array(as.double(seq_len(24)), dim = c(2, 3, 4))
  )
}
