/* quant.c — placeholder, being written. */
typedef int qmla_placeholder_quant;
