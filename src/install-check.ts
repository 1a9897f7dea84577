/**
 * Whether the package's own files are all there, at the sizes the bundle
 * listed (scripts/bundle.js). A partial or truncated copy (part of dist/
 * copied into an image, a file cut short by a full disk) would otherwise show
 * late: every worker crashing at start, or a chunk that loads only at the
 * drain throwing then and cutting its requests. The compiled tree (dist/src/)
 * has no list: nothing to check there.
 */
import {readFileSync, statSync} from 'node:fs';
import {fileURLToPath} from 'node:url';

/** What is wrong with the files `list` names under `under`, one phrase each; empty when all is well or there is no list. */
export function damagedFiles(list: URL, under = ''): string[] {
	let sizes: Record<string, number>;
	try {
		const parsed = JSON.parse(readFileSync(list, 'utf8')) as {package?: unknown; files?: Record<string, number>};
		// A file of that name that is not ours (the helper bundled into an app's own
		// build, beside the app's files) says nothing about this package.
		if (parsed?.package !== 'graceful-cluster' || typeof parsed.files !== 'object' || parsed.files === null) {
			return [];
		}

		sizes = parsed.files;
	} catch {
		// None (the compiled tree), or not JSON: not ours to judge by.
		return [];
	}

	const damaged: string[] = [];
	for (const [file, size] of Object.entries(sizes)) {
		if (!file.startsWith(under)) {
			continue;
		}

		const path = fileURLToPath(new URL(file, list));
		const found = statSync(path, {throwIfNoEntry: false});
		if (found === undefined) {
			damaged.push(`${path} (missing)`);
		} else if (found.size !== size) {
			damaged.push(`${path} (${found.size} bytes; the build wrote ${size})`);
		}
	}

	return damaged;
}
