/* capture_write.c — placeholder, being written. */
typedef int qmla_placeholder_capture_write;
