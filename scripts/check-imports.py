#!/usr/bin/env python3
"""Module imports run one way inside each crate: no circle of modules.

    scripts/check-imports.py [SRC_DIR ...]

Without arguments: the src/ folder of every crate of the workspace (every Cargo.toml under
the repository root but target/). For each crate, a module is a file (`a/b.rs` and
`a/b/mod.rs` are `a::b`); module A depends on B where A's code (test modules left out) names
`crate::B...`, `super::...` or `self::...` resolving into B, or a name the crate root re-exports
from B. A module and its own ancestors are not counted (a parent declares its children; a
child may use what its parent holds). Every strongly connected group of two or more modules
is printed with the edges that close it; the exit status is 1 if there is one.

Why: a circle means no module of it can be understood, tested or moved without the others;
layers that run one way (the core's model <- cuda <- contract <- judge <- engine) stay that way
only if something checks them.
"""

import os,re,sys
from collections import defaultdict
def crate_files(src):
    mods={}
    for dp,dn,fn in os.walk(src):
        for f in fn:
            if not f.endswith('.rs'): continue
            p=os.path.join(dp,f); rel=os.path.relpath(p,src)[:-3].split(os.sep)
            if rel[-1] in ('mod','lib','main'): rel=rel[:-1]
            mods[tuple(rel)]=p
    return mods
def strip(s):
    s=re.sub(r'//[^\n]*','',s)
    s=re.sub(r'/\*.*?\*/','',s,flags=re.S)
    s=re.sub(r'"(\\.|[^"\\])*"','""',s)
    return s
def refs(text):
    out=set()
    # expand use crate::a::{b, c::d}
    for m in re.finditer(r'crate::((?:\w+::)*)(\{[^;]*?\}|\w+)',text):
        base=[x for x in m.group(1).split('::') if x]
        tail=m.group(2)
        if tail.startswith('{'):
            for part in re.split(r'[,{}\s]+',tail):
                if not part or part=='self': out.add(tuple(base)); continue
                out.add(tuple(base+[x for x in part.split('::') if x and x!='*']))
        else:
            out.add(tuple(base+[tail]))
    return out
def root_exports(mods):
    """Names the crate root re-exports (`pub use a::b::{X, Y}`), each to the module it names."""
    out={}
    t=strip(open(mods[()]).read())
    for m in re.finditer(r'pub use (?:crate::|self::)?((?:\w+::)+)(\{[^;]*\}|\w+)(?: as (\w+))?;',t):
        base=tuple(x for x in m.group(1).split('::') if x)
        names=[m.group(3) or m.group(2)] if not m.group(2).startswith('{') else re.split(r'[,{}\s]+',m.group(2))
        for n in names:
            n=n.split(' as ')[-1].strip()
            if n and n!='*' and n!='self': out[n]=base
    return out
def graph(src):
    mods=crate_files(src)
    exports=root_exports(mods)
    g=defaultdict(set)
    for m,p in mods.items():
        t=strip(open(p).read())
        # test modules excluded
        t=re.split(r'#\[cfg\(test\)\]\s*mod tests\s*\{',t)[0]
        # super:: and self:: made absolute (a module's parent is its path without the last part)
        def absol(mt, m=m):
            parts=mt.group(0).split('::')
            base=list(m)
            while parts and parts[0] in ('super','self'):
                if parts[0]=='super': base=base[:-1]
                parts=parts[1:]
            return 'crate::'+'::'.join(base+parts)
        t=re.sub(r'\b(?:super|self)(?:::(?:super|self))*::[\w:]*',absol,t)
        for r in refs(t):
            if len(r)>=1 and r[0] in exports and (r[0],) not in mods:
                r=exports[r[0]]+r
            # longest module prefix
            for k in range(len(r),0,-1):
                if r[:k] in mods: tgt=r[:k]; break
            else: continue
            if tgt==m or tgt==m[:len(tgt)] or m==tgt[:len(m)]: continue
            g[m].add(tgt)
    return mods,g
def sccs(nodes,g):
    idx={};low={};st=[];on=set();res=[];i=[0]
    sys.setrecursionlimit(10000)
    def sc(v):
        idx[v]=low[v]=i[0];i[0]+=1;st.append(v);on.add(v)
        for w in g.get(v,()):
            if w not in idx: sc(w);low[v]=min(low[v],low[w])
            elif w in on: low[v]=min(low[v],idx[w])
        if low[v]==idx[v]:
            comp=[]
            while True:
                w=st.pop();on.discard(w);comp.append(w)
                if w==v:break
            if len(comp)>1: res.append(comp)
    for v in nodes:
        if v not in idx: sc(v)
    return res
def crates(root):
    out=[]
    for dp,dn,fn in os.walk(root):
        dn[:]=[d for d in dn if d not in ('target','.git') and not d.startswith('.')]
        if 'Cargo.toml' in fn and os.path.isdir(os.path.join(dp,'src')):
            out.append(os.path.relpath(os.path.join(dp,'src'),root))
    return sorted(out)
root=os.path.join(os.path.dirname(os.path.abspath(__file__)),'..')
srcs=sys.argv[1:] or [os.path.join(root,c) for c in crates(root)]
bad=0
for src in srcs:
    mods,g=graph(src)
    for comp in sccs(list(mods),g):
        bad+=1
        print(src, 'circle:', ' '.join('::'.join(c) or 'lib' for c in sorted(comp)))
        cs=set(comp)
        for a in sorted(comp):
            for b in sorted(g[a]&cs): print('   ','::'.join(a),'->','::'.join(b))
if bad:
    print(f"{bad} circle(s) of modules: move what both sides need below both, or into the one that needs it")
    sys.exit(1)
print(f"no circles of modules in {len(srcs)} crate(s): " + ", ".join(os.path.relpath(s, root) for s in srcs))
