// Worker count from sample cgroup files, v2 and v1.
import test from 'ava';
import {defaultWorkerCount, parseCfs, parseCpuMax} from '../../src/primary/cpu.js';

test('cpu.max', t => {
	t.is(parseCpuMax('max 100000\n'), undefined);
	t.is(parseCpuMax('200000 100000\n'), 2);
	t.is(parseCpuMax('150000 100000'), 1.5);
	t.is(parseCpuMax('garbage'), undefined);
	t.is(parseCpuMax(''), undefined);
});

test('cfs quota and period', t => {
	t.is(parseCfs('-1\n', '100000\n'), undefined);
	t.is(parseCfs('50000\n', '100000\n'), 0.5);
});

const files = (map: Record<string, string>) => (file: string) => map[file];

test('cgroup v2 limit, rounded up, capped by available parallelism', t => {
	const read = files({'/proc/self/cgroup': '0::/\n', '/sys/fs/cgroup/cpu.max': '250000 100000\n'});
	t.like(defaultWorkerCount(read, 8), {count: 3, source: 'cgroup-v2', cpuLimit: 2.5});
	t.like(defaultWorkerCount(read, 2), {count: 2, source: 'cgroup-v2'});
});

test('cgroup v2: the lowest limit on the way up binds', t => {
	const read = files({
		'/proc/self/cgroup': '0::/kubepods/pod1/ctr\n',
		'/sys/fs/cgroup/kubepods/pod1/ctr/cpu.max': 'max 100000',
		'/sys/fs/cgroup/kubepods/pod1/cpu.max': '100000 100000',
		'/sys/fs/cgroup/kubepods/cpu.max': '400000 100000',
	});
	t.like(defaultWorkerCount(read, 16), {count: 1, cpuLimit: 1});
});

test('a fractional limit still gets one worker', t => {
	const read = files({'/proc/self/cgroup': '0::/\n', '/sys/fs/cgroup/cpu.max': '20000 100000'});
	t.like(defaultWorkerCount(read, 4), {count: 1, cpuLimit: 0.2});
});

test('cgroup v1 quota', t => {
	const read = files({
		'/proc/self/cgroup': '4:memory:/x\n1:cpu,cpuacct:/\n0::/\n',
		'/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us': '200000\n',
		'/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us': '100000\n',
	});
	t.like(defaultWorkerCount(read, 48), {count: 2, source: 'cgroup-v1'});
});

test('no limit anywhere: available parallelism', t => {
	const read = files({'/proc/self/cgroup': '0::/\n', '/sys/fs/cgroup/cpu.max': 'max 100000'});
	t.like(defaultWorkerCount(read, 6), {count: 6, source: 'available-parallelism'});
	t.like(defaultWorkerCount(files({}), 0), {count: 1});
});
