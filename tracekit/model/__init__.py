"""Stage 2, model: what each op *should* cost. ``cost``/``cost_ops`` count FLOPs and bytes from the HLO,
``chips`` holds the sourced peak table (``chips.yaml``) and ``calibrate`` measures a CPU, ``roofline`` joins the
ops frame with the predicted compute, memory and network times."""
