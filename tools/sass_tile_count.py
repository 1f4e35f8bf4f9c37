#!/usr/bin/env python3
# Per-tile executed SASS count of the portable kernel's MT = 1 ring-counter key loop (session 8, issue 14):
# the taken path of one 64-key tile on page 16 (lane page ids, shift path), 4 stages, softcap off, an interior
# tile (no mask), a warp other than warp 0 (no page-id cp.async); "compute" and "tile" with O's rescale skipped,
# "*_rescale" with it run. Static counts of the SASS (cuobjdump -sass of the instantiation object), not a profile.
#
# usage: sass_tile_count.py DUMP.sass MANGLED_KERNEL_NAME [DUMP2.sass NAME2 ...]
# e.g. cuobjdump -sass build-sm90/CMakeFiles/attnserve.dir/src/cuda/attention/sm80/instantiations/attn_bf16_d128.cu.o
#      > d128.sass; the direct kernel (2 CTAs/SM) is ..._paged_attention_kernelI13__nv_bfloat16Li128ELi128ELb1ELi1E
#      Li1ELb1ELb1ELb0EEEvNS1_6ParamsE, the lean loop the same with ...ELb1ELb1ELb1EEEv...
import re,sys
def load(path,name):
    cur=None; out=[]
    for line in open(path):
        m=re.search(r'Function : (\S+)',line)
        if m: cur=m.group(1); continue
        if cur==name:
            m=re.match(r'\s+/\*([0-9a-f]{4,5})\*/\s+(.*?);',line)
            if m: out.append((int(m.group(1),16),m.group(2).strip()))
    return out
def tgt(t):
    m=re.search(r'BRA (?:!?P\d, )?0x([0-9a-f]+)',t); return int(m.group(1),16) if m else None
def count(L):
    A=[a for a,_ in L]; T=dict(L); idx={a:i for i,a in enumerate(A)}
    ep=[a for a,t in L if t.startswith('DEPBAR.LE SB0, 0x0')]
    back=[(a,tgt(t)) for a,t in L if 'BRA' in t and tgt(t) is not None and tgt(t)<a and t.startswith('@')]
    # the key loop: the backward branch right before the epilogue's full wait, with the largest span
    back=[b for b in back if any(0< e-b[0] <= 0x40 for e in ep)]
    be,H=max(back,key=lambda b:b[0]-b[1])
    def rng(a,b): return [x for x in A if a<=x<=b]
    # lane path
    i=idx[H]; brs=[]
    while len(brs)<4:
        if 'BRA' in T[A[i]]: brs.append(A[i])
        i+=1
    S=tgt(T[brs[3]])  # '@P0 BRA S': page_shift >= 0
    lane=len(rng(H,brs[3]))
    i=idx[S]
    while not re.match(r'BRA 0x',T[A[i]]): i+=1
    P=tgt(T[A[i]]); lane+=len(rng(S,A[i]))
    # page ids
    i=idx[P]
    while not re.match(r'@P3 BRA',T[A[i]]): i+=1
    pages=len(rng(P,A[i])); Aa=tgt(T[A[i]]); pages+=1; B=tgt(T[Aa])
    i=idx[B]; body=0
    while T[A[i]]!='LDGDEPBAR':
        if re.match(r'@P0 BRA',T[A[i]]): body=len(rng(A[i]+16,tgt(T[A[i]])-16))
        i+=1
    pages+=len(rng(B,A[i]))-body; dep=A[i]
    # wait: the compare chain to 'DEPBAR.LE SB0, 0x3' (stages 4) + its BRA to the merge point M
    i=idx[dep]+1; wait=0
    d3=[a for a,t in L if a>dep and t=='DEPBAR.LE SB0, 0x3'][0]
    if 'BRA' in T[A[idx[d3]+1]]:  # the compare chain (n 2, 1, 3 ...) to DEPBAR 3, then its BRA to the merge point
        n=0
        while n<3:
            wait+=1
            if 'BRA' in T[A[i]]: n+=1
            i+=1
        wait+=2; M=tgt(T[A[idx[d3]+1]])
    else:  # LEAN: stages == 4 first (compare, branch, DEPBAR 3, falls through)
        while 'BRA' not in T[A[i]]: wait+=1; i+=1
        wait+=2; M=A[idx[d3]+1]
    comp=rng(M,be); skip=set(); resc=set()
    for a in comp:
        t=T[a]
        if t.startswith('@') and 'BRA' in t and tgt(t)>a:
            body=rng(a+16,tgt(t)-16); bt=[T[x] for x in body]
            if any('MUFU.EX2' in x for x in bt) and any('FSETP.GE' in x for x in bt): skip|=set(body)   # softcap
            elif any('-INF' in x for x in bt) and not any('MUFU' in x for x in bt): skip|=set(body)     # mask
            elif bt and all(x.startswith('FMUL') for x in bt): resc|=set(body)                          # O rescale
    c0=len([a for a in comp if a not in skip and a not in resc]); c1=len([a for a in comp if a not in skip])
    return dict(lane=lane,pages=pages,wait=wait,compute=c0,compute_rescale=c1,tile=lane+pages+wait+c0,tile_rescale=lane+pages+wait+c1,static_loop=len(rng(H,be)))
for path,name in zip(sys.argv[1::2],sys.argv[2::2]):
    print(name[-60:], count(load(path,name)))
