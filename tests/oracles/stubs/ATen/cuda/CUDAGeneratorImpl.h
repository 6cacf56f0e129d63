// Stand-in (our own) for the one ATen name flash.h uses.
#pragma once
namespace at { struct PhiloxCudaState {}; }
