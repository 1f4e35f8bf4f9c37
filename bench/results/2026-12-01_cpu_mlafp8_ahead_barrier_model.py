# Model of produce_fp8_tma_ahead's barrier protocol (producer thread 0, one other producer thread, the consumers),
# with mbarrier parity semantics; random interleavings; checks no deadlock and the stage-reuse order.
import random
class Bar:
    def __init__(s, count): s.count=count; s.pending=count; s.phase=0; s.tx=0
    def arrive(s):
        s.pending-=1; s._check()
    def expect_tx(s, n): s.tx+=n; s.arrive()
    def complete_tx(s, n): s.tx-=n; s._check()
    def _check(s):
        if s.pending==0 and s.tx==0: s.phase+=1; s.pending=s.count
    def done(s, parity): return (s.phase & 1) != parity   # phase with this parity completed (current differs)
def run(n, tma_tiles, seed):
    rnd=random.Random(seed)
    full=[Bar(2),Bar(2)]; empty=[Bar(1),Bar(1)]; landed=[Bar(1),Bar(1)]  # full: 2 producer threads
    log=[]; inflight=[]  # TMA copies in flight: (stage, tile)
    state={'stage_tile':[None,None],'consumed':set()}
    def write_stage(t, who):
        s=t%2
        if t>=2: assert (t-2) in state['consumed'], f"tile {t} written by {who} before tile {t-2} was consumed"
    def issue(t, tid):  # generator
        if t in tma_tiles:
            if tid==0:
                write_stage(t,'tma'); landed[t%2].expect_tx(1); inflight.append(t)
        else:
            write_stage(t,'cp.async'); yield ('sync',t)  # named barrier among producer threads
            if tid==0: landed[t%2].arrive()
    def producer(tid):
        yield from issue(0,tid)
        if n>1: yield from issue(1,tid)
        for t in range(n):
            nx=t+1; later= nx<n and nx>=2; sent=False
            row = nx if (later and nx in tma_tiles) else -1
            while not landed[t%2].done((t//2)&1): yield 'spin'
            if t>=2:
                while not empty[t%2].done(((t//2)-1)&1): yield 'spin'
            for q in range(4):
                if tid==0 and row>=0 and not sent and empty[nx%2].done(((nx//2)-1)&1):
                    yield from issue(nx,0); sent=True
                yield ('sync2',t,q)
                write_stage(t,'dequant')
            full[t%2].arrive()
            if later and not sent:
                if row<0 or tid==0:
                    while not empty[nx%2].done(((nx//2)-1)&1): yield 'spin'
                yield from issue(nx,tid)
    def consumer():
        for t in range(n):
            while not full[t%2].done((t//2)&1): yield 'spin'
            for _ in range(rnd.randint(0,3)): yield 'work'
            state['consumed'].add(t); empty[t%2].arrive()
    agents={'p0':producer(0),'p1':producer(1),'c':consumer()}
    waiting={}  # agent -> sync key
    steps=0
    while agents:
        steps+=1
        if steps>200000: raise Exception(f"deadlock n={n} tma={sorted(tma_tiles)} seed={seed} waiting={waiting}")
        # TMA completion randomly
        if inflight and rnd.random()<0.3:
            t=inflight.pop(0); landed[t%2].complete_tx(1)
        name=rnd.choice(list(agents))
        if name in waiting:
            key=waiting[name]; others=[a for a in ('p0','p1') if a!=name]
            if all(waiting.get(o)==key or o not in agents for o in others):
                for o in ('p0','p1'): waiting.pop(o,None)
            continue
        try:
            r=next(agents[name])
            if isinstance(r,tuple): waiting[name]=r
        except StopIteration:
            del agents[name]
    assert not inflight or True
    return True
cnt=0
for n in range(0,9):
    for mask in range(1<<n):
        tma={t for t in range(n) if mask>>t&1}
        for seed in range(6):
            run(n,tma,seed); cnt+=1
print("ok runs",cnt)
