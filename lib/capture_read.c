/* capture_read.c — placeholder, being written. */
typedef int qmla_placeholder_capture_read;
