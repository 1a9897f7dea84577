/**
 * The working directory as the user reached it, through symlinks. `process.cwd()`
 * is the kernel's resolved path: started with `cd /srv/app/current`, it names the
 * release the link pointed to at start, and would keep every later reload on that
 * release after the link is flipped to the next one (issue 18). The shell keeps
 * the path it was given in `PWD`; that is the one workers must start from, and
 * scripts resolve against, so the kernel follows the link anew at each fork.
 *
 * `PWD` is trusted only while it still names the directory we are in: a parent
 * that changed directory without updating it (most non-shell launchers) leaves a
 * stale one. Unicorn and Puma decide the same way.
 */
import {statSync} from 'node:fs';
import path from 'node:path';

export function logicalCwd(pwd: string | undefined = process.env['PWD'], real: string = process.cwd()): string {
	if (pwd === undefined || !path.isAbsolute(pwd)) {
		return real;
	}

	// Lexical normalisation may turn `link/..` into another directory: the
	// comparison below is made on the path we would hand out, not on PWD as given.
	const logical = path.resolve(pwd);
	return sameDirectory(logical, real) ? logical : real;
}

/** Same device and inode: the two paths reach one directory, however. */
function sameDirectory(a: string, b: string): boolean {
	try {
		const first = statSync(a);
		const second = statSync(b);
		return first.isDirectory() && first.dev === second.dev && first.ino === second.ino;
	} catch {
		return false;
	}
}

/**
 * The directory to hand node:cluster for the workers: the logical one when it is
 * not the kernel's path, else none, so workers inherit the directory itself
 * rather than a name for it. An inherited directory still works after the deploy
 * tool deleted it (an old release cleaned up); a path to it would fail every
 * fork with ENOENT.
 */
export const forkCwd = (logical: string, real: string = process.cwd()): string | undefined => logical === real ? undefined : logical;
