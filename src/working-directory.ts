/**
 * The working directory as the user reached it, through symlinks. `process.cwd()`
 * is the kernel's resolved path: started in `/srv/app/current`, it names the
 * release the link pointed to at start, and every later reload would stay on it
 * after the link moved (issue 18). The shell's `PWD` keeps the link, so the
 * kernel follows it anew at each fork. `PWD` is trusted only while it still
 * names the directory we are in (most non-shell launchers leave a stale one);
 * Unicorn and Puma decide the same way.
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
 * None when the logical directory is the kernel's path, so workers inherit the
 * directory itself: that still works after the deploy tool deleted it (an old
 * release cleaned up), where a path to it would fail every fork with ENOENT.
 */
export const forkCwd = (logical: string, real: string = process.cwd()): string | undefined => logical === real ? undefined : logical;
