/* Opening and replacing the files a user names (the control file, the
 * statistics file; vmemctl's files too) so that nothing at the path can make
 * the caller hang or destroy what is not an ordinary file.
 *
 * Shared by the library and vmemctl (compiled into both); no global state,
 * thread-safe. */
#ifndef VMEM_SAFEFILE_H
#define VMEM_SAFEFILE_H

#include <stddef.h>
#include <sys/types.h>

/* "a FIFO", "a directory", "a character device", "a block device",
 * "a socket", "a regular file" or "an unknown kind of file", for messages. */
const char *safefile_kind(mode_t mode);

/* Opens path for reading without ever blocking: refuses (-1, errno EINVAL,
 * why filled with "not a regular file (a FIFO)" or the like) anything that
 * is not a regular file after following symlinks, checked before the open
 * (a device is never opened) and again on the descriptor (the path may
 * change in between).  Other failures: -1 with errno from stat/open and why
 * filled with strerror.  The descriptor returned is blocking, O_CLOEXEC. */
int safefile_open_read(const char *path, char *why, size_t wlen);

/* The path a writer should rename its temporary file onto so that path
 * gets the new content: path itself when nothing or a regular file is
 * there; the link's final target (made absolute) when path is a symlink to
 * a regular file or to nothing in an existing directory, so that the link
 * stays.  Anything else is refused: NULL, errno EINVAL and why filled ("not
 * a regular file (a character device); not replacing it").  The caller
 * frees the result. */
char *safefile_replace_target(const char *path, char *why, size_t wlen);

/* Creates a new temporary file next to target (same directory, so that
 * rename is atomic): O_EXCL, never through a symlink, mode 0600 until the
 * caller changes it.  *tmp gets its malloc'ed name.  Returns the descriptor
 * or -1 with errno set. */
int safefile_temp(const char *target, char **tmp);

/* Writes all len bytes of buf to fd, retrying short writes and EINTR.
 * Returns 1 when all were written, 0 on an error (errno set) or a write
 * that wrote nothing. */
int safefile_write_all(int fd, const void *buf, size_t len);

#endif
