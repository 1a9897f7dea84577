/**
 * How many workers fit the container: the CPU quota of its cgroup, rounded up,
 * never above `os.availableParallelism()` and never below 1.
 *
 * pm2 and throng fork one worker per host CPU and run out of memory under a
 * 2-CPU limit on a 48-core node (pm2#4347). Node 20's libuv (1.46) reads CPU
 * affinity but not the cgroup quota (libuv PR #4278 landed in 1.49), so we read
 * it ourselves: cgroup v2 `cpu.max`, or v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`.
 */
import {readFileSync} from 'node:fs';
import {availableParallelism} from 'node:os';
import path from 'node:path';

export interface WorkerCount {
	readonly count: number;
	/** How the number was chosen, for the start-up log line. */
	readonly source: 'cgroup-v2' | 'cgroup-v1' | 'available-parallelism';
	readonly cpuLimit?: number;
	readonly availableParallelism: number;
}

/** `cpu.max` holds `"<quota> <period>"` or `"max <period>"`; returns CPUs, or undefined for no limit. */
export function parseCpuMax(text: string): number | undefined {
	const [quota, period] = text.trim().split(/\s+/);
	if (quota === undefined || quota === 'max' || period === undefined) {
		return undefined;
	}

	return cpus(Number(quota), Number(period));
}

/** cgroup v1: a quota of -1 means no limit. */
export function parseCfs(quotaText: string, periodText: string): number | undefined {
	return cpus(Number(quotaText.trim()), Number(periodText.trim()));
}

function cpus(quota: number, period: number): number | undefined {
	if (!Number.isFinite(quota) || !Number.isFinite(period) || quota <= 0 || period <= 0) {
		return undefined;
	}

	return quota / period;
}

type Read = (file: string) => string | undefined;

const readOrUndefined: Read = file => {
	try {
		return readFileSync(file, 'utf8');
	} catch {
		return undefined;
	}
};

/**
 * The lowest CPU limit on the way from this process's cgroup up to the root:
 * a limit set on a parent cgroup (the pod) binds its children (the container).
 */
export function cgroupCpuLimit(read: Read = readOrUndefined, root = '/sys/fs/cgroup'): {limit: number; version: 1 | 2} | undefined {
	const membership = read('/proc/self/cgroup') ?? '';
	const v2 = /^0::(.*)$/m.exec(membership)?.[1];
	if (v2 !== undefined || read(path.join(root, 'cpu.max')) !== undefined) {
		let lowest: number | undefined;
		for (let dir = path.join(root, v2 ?? '/'); ; dir = path.dirname(dir)) {
			const text = read(path.join(dir, 'cpu.max'));
			const limit = text === undefined ? undefined : parseCpuMax(text);
			if (limit !== undefined && (lowest === undefined || limit < lowest)) {
				lowest = limit;
			}

			if (dir === root || !dir.startsWith(root)) {
				break;
			}
		}

		if (lowest !== undefined) {
			return {limit: lowest, version: 2};
		}
	}

	// v1: the `cpu` controller's line in /proc/self/cgroup names our cgroup; inside
	// a container it is usually `/`, with the container's limit at the mount's top.
	const v1 = /^\d+:[^:\n]*\bcpu\b[^:\n]*:(.*)$/m.exec(membership)?.[1] ?? '/';
	for (const dir of ['cpu,cpuacct', 'cpu', 'cpuacct,cpu']) {
		for (const cgroup of new Set([v1, '/'])) {
			const base = path.join(root, dir, cgroup);
			const quota = read(path.join(base, 'cpu.cfs_quota_us'));
			const period = read(path.join(base, 'cpu.cfs_period_us'));
			const limit = quota === undefined || period === undefined ? undefined : parseCfs(quota, period);
			if (limit !== undefined) {
				return {limit, version: 1};
			}
		}
	}

	return undefined;
}

export function defaultWorkerCount(read: Read = readOrUndefined, parallelism = availableParallelism(), root?: string): WorkerCount {
	const cgroup = cgroupCpuLimit(read, root);
	if (cgroup === undefined) {
		return {count: Math.max(1, parallelism), source: 'available-parallelism', availableParallelism: parallelism};
	}

	return {
		count: Math.max(1, Math.min(parallelism, Math.ceil(cgroup.limit))),
		source: cgroup.version === 2 ? 'cgroup-v2' : 'cgroup-v1',
		cpuLimit: cgroup.limit,
		availableParallelism: parallelism,
	};
}
