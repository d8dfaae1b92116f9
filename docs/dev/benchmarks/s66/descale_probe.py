import torch,kernelgen,itertools,sys,time
from kernelgen.apps.reference import attention_reference as R,gather_paged,tolerance
E4=torch.float8_e4m3fn;BF=torch.bfloat16;D='cuda'
g=torch.Generator(device=D).manual_seed(0)
def rn(*s):return torch.randn(*s,device=D,generator=g)
def cu(l):return torch.tensor([0]+list(itertools.accumulate(l)),dtype=torch.int32,device=D)
def forms(b,h):
 full=0.5+torch.rand(b,h,device=D,generator=g)
 return {'full':full,'T':full.t().contiguous().t(),'b1':full[:,:1].contiguous(),'1h':full[:1].contiguous(),'exp':full[:1].expand(b,h)}
def chk(name,o,ref,dt=BF,bound=None):
 a,r=tolerance(dt,E4);rr=ref.to(dt).double();e=(o.double()-rr).abs()
 lim=a+r*rr.abs()+(0 if bound is None else bound);bad=(e>lim)|torch.isnan(o)
 print(f'{name}: maxerr {e.nan_to_num(9e9).max().item():.3e} bad {bad.sum().item()}/{o.numel()}',flush=True)
def case(name,f):
 t=time.time()
 try:f()
 except Exception as ex:print(name,'EXC',type(ex).__name__,str(ex)[:200],flush=True)
 print('  t',round(time.time()-t,1),flush=True)
def packed(lq,lk,hq,hkv,d,qfp8=False,**kw):
 b=len(lq);cq,ck=cu(lq),cu(lk)
 q=(rn(sum(lq),hq,d)*(4 if qfp8 else 1)).to(E4 if qfp8 else BF)
 k=(2*rn(sum(lk),hkv,d)).to(E4);v=(2*rn(sum(lk),hkv,d)).to(E4)
 F=forms(b,hkv)
 for kf,vf,qf in kw.pop('combos'):
  kd,vd=F[kf],F[vf];qd=F[qf] if qf else None
  ref,_,*bd=R(q,k,v,cq,ck,k_descale=kd,v_descale=vd,q_descale=qd,causal=True,fp8_mma_bounds=qfp8)
  o=kernelgen.varlen_attention(q,k,v,cq,ck,max(lq),max(lk),causal=True,k_descale=kd,v_descale=vd,q_descale=qd,**kw)
  torch.cuda.synchronize();chk(f'  k{kf} v{vf} q{qf}',o,ref,bound=bd[0] if bd else None)
C=[('b1','1h',None),('T','exp',None),('1h','b1',None)]
CQ=[('b1','1h','T'),('T','b1','1h')]
case('A hopper fp8kv',lambda:packed([300,200,129],[300,400,129],8,2,128,combos=C))
case('A sm80 fp8kv',lambda:packed([300,200,129],[300,400,129],8,2,128,combos=C,arch='sm_80'))
case('C fp8q mma',lambda:packed([300,200,129],[300,400,129],8,2,128,qfp8=True,combos=CQ))
case('C fp8q sm80',lambda:packed([300,200,129],[300,400,129],8,2,128,qfp8=True,combos=CQ,arch='sm_80'))
case('H quantize',lambda:packed([300,200,129],[300,400,129],8,2,128,combos=C[:2],quantize_q=True))
def paged(lq,lk,hq,hkv,d,ps=16,combos=C,**kw):
 b=len(lq);cq=cu(lq);npg=[-(-x//ps) for x in lk];tot=sum(npg)+3
 kc=(2*rn(tot,ps,hkv,d)).to(E4);vc=(2*rn(tot,ps,hkv,d)).to(E4)
 perm=torch.randperm(tot,device=D,generator=g).int();pt=torch.zeros(b,max(npg),dtype=torch.int32,device=D);o=0
 for i,n in enumerate(npg):pt[i,:n]=perm[o:o+n];o+=n
 used=torch.tensor(lk,dtype=torch.int32,device=D);k,v,ck=gather_paged(kc,vc,pt,used);F=forms(b,hkv);q=rn(sum(lq),hq,d).to(BF)
 for kf,vf,_ in combos:
  kd,vd=F[kf],F[vf];ref,_=R(q,k,v,cq,ck,k_descale=kd,v_descale=vd,causal=True)
  out=kernelgen.varlen_attention(q,kc,vc,cq,None,max(lq),max(lk),seqused_k=used,page_table=pt,causal=True,k_descale=kd,v_descale=vd,**kw)
  torch.cuda.synchronize();chk(f'  k{kf} v{vf}',out,ref)
case('B decode',lambda:paged([1]*4,[3000,1,777,64],32,8,128))
case('B decode split4',lambda:paged([1]*4,[3000,1,777,64],32,8,128,num_splits=4))
case('D mixed',lambda:paged([500,1,1,300],[800,2000,50,300],32,8,128))
case('D mixed sm80',lambda:paged([500,1,1,300],[800,2000,50,300],32,8,128,arch='sm_80'))
